"""Where vLLM keeps the names the plugin reads (vllm_plugin/seams.py), on the installed vLLM (0.32).
The same reads on vLLM 0.33 and 0.34 are in test_vllm_releases."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import draft_head_fp8
from draft_head_fp8.vllm_plugin import seams, vllm_source

PACKAGE = Path(draft_head_fp8.__file__).parent


def test_every_seam_is_where_the_table_says_on_the_installed_vllm():
    assert seams.installed_release() == "0.32"
    assert seams.missing() == {}


def test_a_release_reads_its_own_row_else_the_nearest_one_below():
    flag = seams.BY_NAME["cpu_fp8_w8a16_supported"]
    assert (
        flag.location("0.32")
        == flag.location("0.33")
        == ("vllm._custom_ops:_supports_cpu_fp8_w8a16")
    )
    assert flag.location("0.34") == "vllm._cpu_ops:_supports_cpu_fp8_w8a16"
    assert flag.location("0.35") == flag.location("1.2") == flag.location("0.34")
    assert flag.location("0.31") == flag.location("0.32")  # older than all: the oldest row


@pytest.mark.parametrize(
    ("version", "release"),
    [("0.32.0", "0.32"), ("0.32.0+cpu", "0.32"), ("0.34.0", "0.34"), ("0.33.1rc1", "0.33"),
     ("1.10.2", "1.10")],
)  # fmt: skip
def test_the_release_of_a_version(version, release):
    assert seams.release_of(version) == release


def test_a_version_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a vLLM version: 'dev'"):
        seams.release_of("dev")


def test_reading_a_seam_where_another_release_keeps_it_names_what_is_missing():
    # vLLM 0.32 has no vllm/_cpu_ops.py: read as if it were 0.34, the flag is missing, by name.
    missing = seams.missing("0.34")
    assert list(missing) == ["cpu_fp8_w8a16_supported"]
    assert missing["cpu_fp8_w8a16_supported"].startswith(
        "vLLM 0.34 has no vllm._cpu_ops:_supports_cpu_fp8_w8a16 (cpu_fp8_w8a16_supported: "
    )
    with pytest.raises(seams.SeamMissing, match="ModuleNotFoundError"):
        seams.read("cpu_fp8_w8a16_supported", "0.34")


def test_the_holder_is_what_the_read_returns(monkeypatch):
    owner, attribute = seams.holder("cpu_fp8_w8a16_supported")
    assert (owner.__name__, attribute) == ("vllm._custom_ops", "_supports_cpu_fp8_w8a16")
    monkeypatch.setattr(owner, attribute, "patched")
    assert seams.read("cpu_fp8_w8a16_supported") == "patched"


def _names_in_code(path: Path) -> set[str]:
    """Every name, attribute, imported module part and non-docstring string in a module."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                names.update(part for word in node.value.split() for part in word.split("."))
    return names


def test_the_plugin_reads_vllm_only_through_the_seams_table():
    # Its logger is vLLM's (so vLLM's logging configuration shows its lines), its version is
    # read as installed, and annotations name vLLM's config: nothing else is imported directly.
    allowed = {"vllm.logger", "vllm", "vllm.config:VllmConfig"}
    imported = {}
    for path in (PACKAGE / "vllm_plugin").glob("*.py"):
        if path.name == "seams.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
                for alias in node.names:
                    name = f"{node.module}:{alias.name}"
                    if node.module != "vllm.logger" and name not in allowed:
                        imported.setdefault(path.name, []).append(name)
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "vllm"]
                imported.setdefault(path.name, []).extend(n for n in names if n not in allowed)
    assert {path: names for path, names in imported.items() if names} == {}


def test_no_module_but_seams_spells_a_private_vllm_name():
    private = seams.private_names()
    assert {"_supports_cpu_fp8_w8a16", "_SPECULATIVE_DECODING_MODELS", "_enum"} <= private
    spelled = {
        str(path.relative_to(PACKAGE)): sorted(private & _names_in_code(path))
        for path in PACKAGE.rglob("*.py")
        if path.name != "seams.py"
    }
    assert {path: names for path, names in spelled.items() if names} == {}


def test_an_instance_seam_is_an_attribute_vllms_init_sets():
    from types import SimpleNamespace

    where = seams.INSTANCE_BY_NAME["gemma4_suppress_token_ids"].location("0.32")
    assert where == "vllm.model_executor.models.gemma4_mtp:Gemma4MTP._suppress_token_ids"
    vllm_source.assigned_in_class(where)  # Gemma4MTP.__init__ sets it: no error
    with pytest.raises(AttributeError, match="never sets self._no_such_ids"):
        vllm_source.assigned_in_class(where.replace("_suppress_token_ids", "_no_such_ids"))
    drafter = SimpleNamespace(_suppress_token_ids=[3, 7])
    assert seams.read_from(drafter, "gemma4_suppress_token_ids") == [3, 7]
    assert seams.read_from(SimpleNamespace(), "gemma4_suppress_token_ids", ()) == ()


def test_every_familys_suppressed_tokens_name_an_instance_seam():
    from draft_head_fp8.families import all_families

    named = {f.name: f.suppressed_tokens for f in all_families() if f.suppressed_tokens}
    assert named == {"gemma4-mtp": "gemma4_suppress_token_ids"}
    assert set(named.values()) <= set(seams.INSTANCE_BY_NAME)


# -- the methods the plugin wraps (updates.watch): a vLLM that moved one refuses, never skips


def _real(where: str) -> object:
    """An object of vLLM's own class ``module:Class``, built without its ``__init__``."""
    module_name, _, class_name = where.partition(":")
    return object.__new__(getattr(importlib.import_module(module_name), class_name))


def _moved(obj: object, name: str) -> object:
    """``obj`` as a vLLM whose class lost method ``name`` would build it."""
    return object.__new__(type(f"Moved{type(obj).__name__}", (type(obj),), {name: None}))


def _holders(release: str = "0.32") -> dict[str, object]:
    first = {m.holder: m.location(release)[0] for m in seams.WRAPPED_METHODS}
    return {
        "model_runner": _real(first[seams.MODEL_RUNNER]),
        "worker": _real(first[seams.WORKER]),
        "target": _real("vllm.model_executor.models.llama:LlamaForCausalLM"),
        "drafter": _real("vllm.model_executor.models.llama_eagle:EagleLlamaForCausalLM"),
    }


def test_vllms_own_runner_worker_and_models_have_every_wrapped_method():
    from draft_head_fp8.vllm_plugin import updates

    assert updates.unwrappable(**_holders()) is None


@pytest.mark.parametrize("method", seams.WRAPPED_METHODS, ids=lambda m: m.name)
def test_any_wrapped_method_missing_on_a_live_object_is_named_with_its_release(method):
    from draft_head_fp8.vllm_plugin import updates

    holders = _holders()
    key = {seams.MODEL_RUNNER: "model_runner", seams.WORKER: "worker", seams.MODEL: "target"}
    holders[key[method.holder]] = moved = _moved(holders[key[method.holder]], method.name)
    why = updates.unwrappable(**holders)
    assert why == (
        f"vLLM 0.32 has no {type(moved).__module__}.{type(moved).__qualname__}.{method.name} (the "
        f"{method.holder}'s method the plugin wraps to {method.why}): this vLLM moved a name the "
        "plugin needs (vllm_plugin/seams.py); refusing to serve a head that a weight update could "
        "change unproven"
    )


def test_the_pick_after_a_term_overrides_exactly_the_drafter_methods_the_table_names():
    from draft_head_fp8.vllm_plugin.markov_pick import MarkovTermPick

    own = {name for name, value in vars(MarkovTermPick).items() if callable(value)}
    assert {name for name in own if not name.startswith("_")} == {
        m.name for m in seams.TERM_PICK_METHODS
    }
    for method in seams.TERM_PICK_METHODS:
        for where in method.location("0.32"):  # vLLM's own DSpark class has each
            assert callable(getattr(_real(where), method.name, None)), where


def test_every_wrapped_method_has_its_wrapper_and_no_wrapper_is_outside_the_table():
    source = (PACKAGE / "vllm_plugin" / "updates.py").read_text()
    wrapped = set(re.findall(r'^\s+"(\w+)": \(partial\(', source, re.M))
    assert wrapped == {m.name for m in seams.WRAPPED_METHODS}
    assert source.count("_wrap(") == 2  # its definition, and the one call that walks the table


def test_the_sources_say_which_wrapped_method_a_release_lacks_without_importing_vllm(
    tmp_path, monkeypatch
):
    assert seams.methods_missing_in_source("0.32") == {}
    # vLLM 0.32's workers with wake_up renamed, first on the path (read, never imported).
    for module in ("gpu_worker", "cpu_worker"):
        original = vllm_source.source_of(f"vllm.v1.worker.{module}")
        moved = tmp_path / "vllm" / "v1" / "worker" / f"{module}.py"
        moved.parent.mkdir(parents=True, exist_ok=True)
        moved.write_text(original.read_text().replace("def wake_up(", "def wake_up_renamed("))
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = seams.methods_missing_in_source("0.32")
    assert set(missing) == {
        "wake_up@vllm.v1.worker.gpu_worker:Worker",
        "wake_up@vllm.v1.worker.cpu_worker:CPUWorker",
    }
    assert missing["wake_up@vllm.v1.worker.cpu_worker:CPUWorker"].startswith(
        "vLLM 0.32 has no vllm.v1.worker.cpu_worker:CPUWorker.wake_up (the worker's method the "
        "plugin wraps to prove the head again after sleep restores the weights)"
    )
