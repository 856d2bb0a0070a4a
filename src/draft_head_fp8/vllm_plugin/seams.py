"""Where each supported vLLM release keeps the names of vLLM's that the plugin reads and vLLM does
not promise to keep: private flags, kernel classes, registry tables. The one module that knows;
every other module asks it (``read``), so a release that moves a name is one row here, not an
``AttributeError`` at start-up (vLLM 0.34 moved ``_supports_cpu_fp8_w8a16`` out of
``_custom_ops``).

The table is data: per seam, per release (``"0.32"``, ...), ``"module:attribute"`` (the attribute
may be dotted: ``current_platform._enum``). A release the table does not name reads the nearest
release it does name below it (a newer vLLM reads the newest row), and ``missing`` says which
seams that release lacks, which is what the compatibility test checks against each release.

Importing this module imports nothing of vLLM's; ``read`` imports the seam's module on first use.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

# The releases the table was read from, oldest first (support.py says how each is tested).
RELEASES = ("0.32", "0.33", "0.34")


@dataclass(frozen=True)
class Seam:
    name: str  # how the plugin asks for it
    why: str  # what the plugin reads it for
    where: dict[str, str]  # release -> "module:attribute"; a release not named reads the one below

    def location(self, release: str) -> str:
        """Where ``release`` keeps it: its own row, else the newest row at or below it (the oldest
        row for a release older than all)."""
        named = sorted(self.where, key=release_key)
        below = [r for r in named if release_key(r) <= release_key(release)]
        return self.where[below[-1] if below else named[0]]


def _same(where: str) -> dict[str, str]:
    return {release: where for release in RELEASES}


_REGISTRY = "vllm.model_executor.models.registry"
_LINEAR = "vllm.model_executor.kernels.linear"

SEAMS = (
    Seam(
        "cpu_fp8_w8a16_supported",
        "whether this vLLM build ships the CPU W8A16 op the packed head runs on",
        {
            "0.32": "vllm._custom_ops:_supports_cpu_fp8_w8a16",
            "0.33": "vllm._custom_ops:_supports_cpu_fp8_w8a16",
            "0.34": "vllm._cpu_ops:_supports_cpu_fp8_w8a16",
        },
    ),
    Seam(
        "possible_fp8_kernels",
        "vLLM's FP8 kernels per platform, in its order of preference",
        _same(f"{_LINEAR}:_POSSIBLE_FP8_KERNELS"),
    ),
    Seam(
        "choose_scaled_mm_linear_kernel",
        "vLLM's own choice of an FP8 kernel among given ones",
        _same(f"{_LINEAR}:choose_scaled_mm_linear_kernel"),
    ),
    Seam(
        "init_fp8_linear_kernel",
        "vLLM's constructor of an FP8 linear kernel, forced to the one chosen for the head",
        _same(f"{_LINEAR}:init_fp8_linear_kernel"),
    ),
    Seam(
        "cpu_fp8_per_tensor_kernel",
        "vLLM's CPU W8A16 kernel class, whose packing and apply the CPU head runs",
        _same(f"{_LINEAR}.scaled_mm.cpu:CPUFp8PerTensorScaledMMLinearKernel"),
    ),
    Seam(
        "fp8_scaled_mm_layer_config",
        "the config vLLM's FP8 kernels are chosen by",
        _same(f"{_LINEAR}.scaled_mm.ScaledMMLinearKernel:FP8ScaledMMLinearLayerConfig"),
    ),
    Seam(
        "platform_enum",
        "the key of this platform in vLLM's kernel tables",
        _same("vllm.platforms:current_platform._enum"),
    ),
    Seam(
        "speculative_models",
        "vLLM's table of speculative-decoding architectures (architecture -> module, class)",
        _same(f"{_REGISTRY}:_SPECULATIVE_DECODING_MODELS"),
    ),
    Seam(
        "model_registry",
        "vLLM's registry, whose entries say which class vLLM builds for an architecture",
        _same("vllm:ModelRegistry"),
    ),
    Seam(
        "lazy_registered_model",
        "the registry entry vLLM builds from its tables: (module, class), loaded on use",
        _same(f"{_REGISTRY}:_LazyRegisteredModel"),
    ),
    Seam(
        "registry_module_name",
        "how vLLM turns a table's module name into an importable one (0.34: 'vllm.models.*')",
        _same(f"{_REGISTRY}:_resolve_module_name"),
    ),
    Seam(
        "unquantized_embedding_method",
        "vLLM's stock BF16 head method: what the share must find and the BF16 rows run through",
        _same("vllm.model_executor.layers.vocab_parallel_embedding:UnquantizedEmbeddingMethod"),
    ),
    Seam(
        "engine_process_shutdown_timeout",
        "how long the front end lets the engine core process exit after its SIGTERM before it "
        "kills the process tree (shutdown_grace: the end-of-serving record is written then)",
        _same("vllm.v1.engine.utils:get_engine_process_shutdown_timeout"),
    ),
)

BY_NAME = {seam.name: seam for seam in SEAMS}


@dataclass(frozen=True)
class InstanceSeam:
    """A private attribute vLLM's own ``__init__`` sets on an object the plugin holds (its
    drafter, a mixin's ``self``): where a release keeps it is ``module:Class.attribute``."""

    name: str
    why: str
    where: dict[str, str]  # release -> "module:Class.attribute"

    location = Seam.location


INSTANCE_SEAMS = (
    InstanceSeam(
        "gemma4_suppress_token_ids",
        "the token ids Gemma 4's assistant masks out of its logits: the exact pick must never "
        "choose one (set in Gemma4MTP.__init__ from the generation config)",
        _same("vllm.model_executor.models.gemma4_mtp:Gemma4MTP._suppress_token_ids"),
    ),
)

INSTANCE_BY_NAME = {seam.name: seam for seam in INSTANCE_SEAMS}


class SeamMissing(AttributeError):
    """A name the plugin reads is not where the installed vLLM should keep it."""


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def release_of(version: str) -> str:
    """``"0.34"`` of ``"0.34.0"``, ``"0.32.0+cpu"``, ``"0.33.1rc1"``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a vLLM version: {version!r}")
    return f"{int(match[1])}.{int(match[2])}"


@cache
def installed_release() -> str:
    import vllm

    return release_of(vllm.__version__)


def _resolve(where: str) -> Any:
    module_name, _, path = where.partition(":")
    value: Any = importlib.import_module(module_name)
    for attribute in path.split("."):
        value = getattr(value, attribute)
    return value


def read(name: str, release: str | None = None) -> Any:
    """The value of seam ``name`` in the installed vLLM (read where ``release`` keeps it)."""
    seam = BY_NAME[name]
    where = seam.location(release or installed_release())
    try:
        return _resolve(where)
    except (ImportError, AttributeError) as exc:
        raise SeamMissing(
            f"vLLM {release or installed_release()} has no {where} ({seam.name}: {seam.why}); "
            f"{type(exc).__name__}: {exc}"
        ) from None


def read_from(obj: Any, name: str, default: Any = None, release: str | None = None) -> Any:
    """Instance seam ``name`` of ``obj`` (one of the seam's class, built by vLLM), else
    ``default`` where that object's ``__init__`` did not set it."""
    where = INSTANCE_BY_NAME[name].location(release or installed_release())
    return getattr(obj, where.rpartition(".")[2], default)


def _assigned_in_class(where: str) -> None:
    """Raise ``SeamMissing`` unless ``module:Class.attribute``'s class assigns
    ``self.attribute`` in one of its methods (read from its source: no object is built)."""
    import ast
    import inspect
    import textwrap

    path, _, attribute = where.rpartition(".")
    cls = _resolve(path)
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    for node in ast.walk(tree):
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == attribute
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                return
    raise AttributeError(f"{path} never sets self.{attribute}")


def missing(release: str | None = None) -> dict[str, str]:
    """Every seam the installed vLLM lacks where the table says ``release`` keeps it -> why."""
    found = {}
    for seam in SEAMS:
        try:
            read(seam.name, release)
        except SeamMissing as exc:
            found[seam.name] = str(exc)
    for instance_seam in INSTANCE_SEAMS:
        where = instance_seam.location(release or installed_release())
        try:
            _assigned_in_class(where)
        except (ImportError, AttributeError, OSError, TypeError) as exc:
            found[instance_seam.name] = (
                f"vLLM {release or installed_release()} has no {where} ({instance_seam.name}: "
                f"{instance_seam.why}); {type(exc).__name__}: {exc}"
            )
    return found


def private_names() -> frozenset[str]:
    """The vLLM module and attribute names in the table that vLLM marks private (a leading
    underscore): no module but this one may spell them."""
    names = set()
    for seam in (*SEAMS, *INSTANCE_SEAMS):
        for where in seam.where.values():
            module_name, _, path = where.partition(":")
            for part in (*module_name.split("."), *path.split(".")):
                if part.startswith("_"):
                    names.add(part)
    return frozenset(names)


def holder(name: str, release: str | None = None) -> tuple[Any, str]:
    """(object, attribute) that holds seam ``name``: what a test patches to stand for a vLLM
    build without it, wherever the installed release keeps it."""
    module_name, _, path = BY_NAME[name].location(release or installed_release()).partition(":")
    *owners, attribute = path.split(".")
    owner: Any = importlib.import_module(module_name)
    for part in owners:
        owner = getattr(owner, part)
    return owner, attribute
