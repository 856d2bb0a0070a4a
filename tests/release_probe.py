"""Run in a subprocess by tests/test_vllm_releases.py, with one vLLM release first on PYTHONPATH and
the experiment flag on: imports the plugin beside that vLLM, registers it, and prints one JSON
object of what it found (the test asserts on it, comparing each release with the installed 0.32).

What it records:
- ``flag_off_changes_nothing``: with the flag unset, registering leaves vLLM's registry as it was;
- ``vllm``: the version imported and from where (so a wrong path cannot pass as a release);
- ``missing_seams``: every seam (vllm_plugin/seams.py) that release lacks where the table says;
- ``drafters``: per speculative architecture, what vLLM's own registry builds (resolved before the
  plugin's entry replaced it), what the plugin registered in its place (resolved through vLLM's
  registry, as vLLM resolves it), and, for a class that refuses, the reason it refuses with;
- ``cuda_qwen35``: on a release whose Qwen3.5 MTP module chooses its class by platform, the class
  it builds on CUDA (read from its source: the NVIDIA module imports CUDA-only ops and cannot be
  imported here) and the family's decision on it;
- ``head_quantization``: vLLM's ``draft_lm_head_quantization`` field, if any, and the plugin's
  decision on that release's own ``SpeculativeConfig`` class for each scheme;
- ``bf16_rows``: the BF16 rows' head is that release's ``ParallelLMHead``, its logits the matmul's;
- ``cpu_kernel_gate``: the CPU head kernel's gate, which reads the W8A16 flag, as on a CPU;
- ``decisions``: the plugin's pure decisions that read vLLM (head recognition, the FP8 scheme's
  name, the layout-keeping kernels per platform, the vocab shards): equal to 0.32's or not;
- ``verdicts``: the verdict on every speculative architecture of that release
  (``vllm_plugin/registry_facts.py``), whose reason the refusing classes must give.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import sys
import typing
from pathlib import Path


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def drafters() -> dict:
    from vllm import ModelRegistry

    from draft_head_fp8.errors import HeadFp8EligibilityError
    from draft_head_fp8.vllm_plugin import vllm_classes
    from draft_head_fp8.vllm_plugin.drafter import DraftHeadFp8Drafter

    found = {}
    for architecture in sorted(vllm_classes.speculative_architectures()):
        entry = ModelRegistry.models[architecture]
        record: dict = {"registry_entry": f"{entry.module_name}:{entry.class_name}"}
        found[architecture] = record
        try:
            builds = vllm_classes.vllm_class(architecture)
        except Exception as exc:  # some model files refuse this platform at import
            record["vllm_cannot_build_here"] = f"{type(exc).__name__}: {exc}"
            continue
        registered = ModelRegistry._try_load_model_cls(architecture)
        if registered is None:
            record["error"] = "vLLM could not load the registered class"
            continue
        record.update(
            vllm_builds=_qualified(builds),
            registered=_qualified(registered),
            subclasses_vllms=issubclass(registered, builds),
            serves=issubclass(registered, DraftHeadFp8Drafter),
        )
        refusal = getattr(registered, "refusal", None)
        if refusal is not None:
            # The refusing __init__ alone: some of vLLM's classes have a __new__ that reads a
            # real config first, which an engine has and this probe does not.
            try:
                registered.__init__(object.__new__(registered), vllm_config=None)
                record["refused_with"] = None
            except HeadFp8EligibilityError as exc:
                record["refused_with"] = str(exc)
            record["refusal"] = refusal
    return found


def cuda_qwen35() -> dict | None:
    """The class a release builds for Qwen3_5MoeMTP on CUDA, read from the source of the module
    its registry names, and the family's decision on a class of that name."""
    from draft_head_fp8.families import by_name
    from draft_head_fp8.vllm_plugin import vllm_classes
    from draft_head_fp8.vllm_plugin.drafter import class_refusal

    module, _, cls = vllm_classes.speculative_architectures()["Qwen3_5MoeMTP"].partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
        return None  # a plain model file: one class on every platform
    tree = ast.parse(Path(spec.origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "is_cuda" in ast.unparse(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and any(a.name == cls for a in stmt.names):
                    where = importlib.util.resolve_name("." * stmt.level + stmt.module, module)
                    stand_in = type(cls, (), {"__module__": where})
                    family = by_name("qwen35-mtp")
                    return {
                        "builds": _qualified(stand_in),
                        "refusal": class_refusal(family, "Qwen3_5MoeMTP", stand_in),
                    }
    return None


def head_quantization() -> dict:
    from vllm.config import SpeculativeConfig

    from draft_head_fp8.errors import HeadFp8EligibilityError
    from draft_head_fp8.vllm_plugin.drafter import one_head_quantization

    fields = {f.name: f for f in dataclasses.fields(SpeculativeConfig)}
    field = fields.get("draft_lm_head_quantization")
    if field is None:
        return {"field": None}
    schemes = [a for a in typing.get_args(field.type) for a in (typing.get_args(a) or (a,)) if a]
    schemes = [s for s in schemes if isinstance(s, str)]
    decisions = {}
    for scheme in [field.default, *schemes]:
        # The release's own class, its other fields unset: building one needs a model.
        config = object.__new__(SpeculativeConfig)
        object.__setattr__(config, "draft_lm_head_quantization", scheme)
        try:
            one_head_quantization(config)
            decisions[str(scheme)] = None
        except HeadFp8EligibilityError as exc:
            decisions[str(scheme)] = str(exc)
    return {"field": str(field.type), "default": field.default, "decisions": decisions}


def decisions() -> dict:
    from vllm.model_executor.layers import vocab_parallel_embedding as vpe

    from draft_head_fp8 import policy
    from draft_head_fp8.shards import shard
    from draft_head_fp8.vllm_plugin import seams
    from draft_head_fp8.vllm_plugin.kernels import LAYOUT_KEEPING_KERNELS
    from draft_head_fp8.vllm_plugin.plan import fp8_head_quant_config

    quant = fp8_head_quant_config()
    heads = {
        name: policy.eligibility(
            layer=None, parallel_lm_head_class=cls, quant_config=quant, role="draft",
            prefix="lm_head", enabled=True, ordered_embeddings=False, tie_word_embeddings=True,
        ).reason
        for name, cls in (("ParallelLMHead", vpe.ParallelLMHead),
                          ("VocabParallelEmbedding", vpe.VocabParallelEmbedding))
    }  # fmt: skip
    from vllm.platforms import PlatformEnum

    kernels = seams.read("possible_fp8_kernels")
    kept = {
        platform.name: [k.__name__ for k in kernels.get(platform, []) if k.__name__ in
                        LAYOUT_KEEPING_KERNELS]
        for platform in (PlatformEnum.CUDA, PlatformEnum.CPU)
    }  # fmt: skip
    shards_agree = all(
        (shard(vocab, rank, size).start, shard(vocab, rank, size).end)
        == (
            (i := vpe.VocabParallelEmbedding._get_indices(
                vpe.pad_vocab_size(vocab), vpe.pad_vocab_size(vocab), vocab, vocab, rank, size
            )).padded_org_vocab_start_index,
            i.padded_org_vocab_end_index,
        )
        for vocab in (63, 2080, 151936, 262145)
        for size in (1, 2, 8)
        for rank in range(size)
    )  # fmt: skip
    return {
        "head_reasons": heads,
        "online_spec": policy.online_quant_spec(quant),
        "layout_keeping_kernels": kept,
        "shards_are_vllms": shards_agree,
    }


def bf16_rows() -> dict:
    """The BF16 rows' head on that release: one of its ``ParallelLMHead`` (what its unquantized
    head method prepares a head by), prepared by its method, giving the matmul's logits."""
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    from draft_head_fp8.vllm_plugin.batch_paths import BF16Head

    gen = torch.Generator().manual_seed(0)
    rows = (torch.randn(128, 32, generator=gen) * 0.05).bfloat16()
    x = torch.randn(3, 32, generator=gen).bfloat16()
    head = BF16Head(rows)
    expected = (x.float() @ rows.float().t()).bfloat16()
    return {
        "holder_is_parallel_lm_head": isinstance(head.layer, ParallelLMHead),
        "logits_are_the_matmuls": bool(
            torch.allclose(head(x).float(), expected.float(), atol=2e-2, rtol=2e-2)
        ),
    }


def cpu_kernel_gate() -> list:
    """The CPU head kernel's gate as a CPU start would meet it: it reads the W8A16 flag where the
    release keeps it (0.34 moved it; read from the old place this raised AttributeError). The
    wheels' compiled ops are not here, so the op is missing and the gate says so."""
    from vllm.platforms import current_platform

    from draft_head_fp8.vllm_plugin.kernels import CPUFp8W8A16HeadKernel

    type(current_platform).is_cpu = lambda self: True  # this probe's process only
    return list(CPUFp8W8A16HeadKernel.is_supported())


def verdicts() -> dict:
    from draft_head_fp8.vllm_plugin import registry_facts

    return {v.architecture: v.as_dict() for v in registry_facts.verdicts()}


def flag_off_changes_nothing(register) -> bool:
    """With the flag unset, ``register`` leaves vLLM's registry exactly as it was (then the flag
    is set back for the rest of the probe)."""
    import os

    from vllm import ModelRegistry

    from draft_head_fp8.settings import EXPERIMENT_ENV

    before = dict(ModelRegistry.models)
    value = os.environ.pop(EXPERIMENT_ENV)
    try:
        register()
    finally:
        os.environ[EXPERIMENT_ENV] = value
    after = dict(ModelRegistry.models)
    return before.keys() == after.keys() and all(before[k] is after[k] for k in before)


def main() -> None:
    import vllm

    from draft_head_fp8.policy import env_enabled
    from draft_head_fp8.vllm_plugin import register, seams

    assert env_enabled(), "the probe runs with the experiment flag on"
    flag_off = flag_off_changes_nothing(register)
    known = set(vllm.ModelRegistry.models)
    register()
    report = {
        "flag_off_changes_nothing": flag_off,
        # Architectures the plugin added to vLLM's registry (a record's name this release lacks).
        "registered_beyond_vllm": sorted(set(vllm.ModelRegistry.models) - known),
        "vllm": {"version": vllm.__version__, "file": vllm.__file__},
        "release": seams.installed_release(),
        "missing_seams": seams.missing(),
        "drafters": drafters(),
        "cuda_qwen35": cuda_qwen35(),
        "head_quantization": head_quantization(),
        "decisions": decisions(),
        "bf16_rows": bf16_rows(),
        "cpu_kernel_gate": cpu_kernel_gate(),
        "verdicts": verdicts(),
    }
    print("RELEASE-PROBE " + json.dumps(report, sort_keys=True, default=str))


if __name__ == "__main__":
    sys.exit(main())
