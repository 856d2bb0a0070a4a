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
from dataclasses import dataclass
from functools import cache
from typing import Any

from draft_head_fp8 import support
from draft_head_fp8.vllm_plugin import vllm_source

# The releases the table was read from, oldest first: support.py's (how each is tested).
RELEASES = support.RELEASES


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
_VOCAB = "vllm.model_executor.layers.vocab_parallel_embedding"

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
        _same(f"{_VOCAB}:UnquantizedEmbeddingMethod"),
    ),
    # Public names, rows all the same: a release that moves one is one row here, and the release
    # check (``missing``) finds it before an engine does.
    Seam("parallel_lm_head", "vLLM's LM head class, which the private FP8 head is made as and "
         "the BF16 rows run through", _same(f"{_VOCAB}:ParallelLMHead")),
    Seam("quantize_method_base", "the base of every vLLM quant method, the FP8 head method's",
         _same("vllm.model_executor.layers.quantization.base_config:QuantizeMethodBase")),
    Seam("fp8_online_linear_method", "vLLM's online per-tensor FP8 method, whose activation "
         "quantization the head's kernel is chosen with",
         _same("vllm.model_executor.layers.quantization.online.fp8:"
               "Fp8PerTensorOnlineLinearMethod")),
    Seam("fp8_static_tensor_key", "the FP8 weight quantization key (static, per tensor)",
         _same("vllm.model_executor.layers.quantization.utils.quant_utils:kFp8StaticTensorSym")),
    Seam("online_quantization_config", "vLLM's online quantization config, which the head's "
         "FP8 config is", _same("vllm.model_executor.layers.quantization.online.base:"
                                "OnlineQuantizationConfig")),
    Seam("resolve_quantization_config", "how vLLM builds a quantization config by name",
         _same("vllm.config.quantization:resolve_quantization_config")),
    Seam("current_vllm_config", "the config vLLM is building a model under",
         _same("vllm.config:get_current_vllm_config")),
    Seam("set_current_vllm_config", "building the private head under the drafter's config",
         _same("vllm.config:set_current_vllm_config")),
    Seam("tp_group", "the tensor-parallel group: the whole head's amax, the ranks' exchange",
         _same("vllm.distributed.parallel_state:get_tp_group")),
    Seam("pp_group", "the pipeline-parallel group, which the share refuses",
         _same("vllm.distributed.parallel_state:get_pp_group")),
    Seam("current_platform", "the platform vLLM runs on (CPU or CUDA)",
         _same("vllm.platforms:current_platform")),
    Seam("engine_process_shutdown_timeout", "how long the front end lets the engine core process "
         "exit after its SIGTERM before it kills the process tree (shutdown_grace: the "
         "end-of-serving record is written then)",
         _same("vllm.v1.engine.utils:get_engine_process_shutdown_timeout")),
    Seam("config_registry", "vLLM's own config classes by model type, beside transformers': "
         "a drafter vLLM names only for model types neither has needs remote code",
         _same("vllm.transformers_utils.config:_CONFIG_REGISTRY")),
    Seam("kernel_ops", "torch's operator namespaces once vLLM's custom ops are imported (which "
         "loads this build's compiled kernels): a drafter's model file that calls an operator "
         "not there cannot run here", _same("vllm._custom_ops:torch.ops")),
)  # fmt: skip

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


# Who holds a wrapped method: the objects the plugin finds in the worker at the share.
MODEL_RUNNER, WORKER, MODEL = "model runner", "worker", "model"


@dataclass(frozen=True)
class WrappedMethod:
    """A vLLM method the plugin wraps (``updates.watch``) to prove the head again when it runs.
    Missing, it would be skipped without a word and a weight update would go unproven: with the
    flag on, a missing one refuses start-up (``unwrappable``), and ``missing`` checks each
    release's classes for it."""

    name: str  # the method's name, as vLLM calls it
    holder: str  # MODEL_RUNNER, WORKER or MODEL
    why: str  # what the plugin proves when it runs
    where: dict[str, tuple[str, ...]]  # release -> the "module:Class"es that must have it

    location = Seam.location


_V1_RUNNER = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"
_MRV2_RUNNER = "vllm.v1.worker.gpu.model_runner:GPUModelRunner"
_V1_CPU_RUNNER = "vllm.v1.worker.cpu_model_runner:CPUModelRunner"
_MRV2_CPU_RUNNER = "vllm.v1.worker.cpu.model_runner:CPUModelRunner"
_RUNNERS = {
    "0.32": (_V1_RUNNER, _V1_CPU_RUNNER, _MRV2_RUNNER, _MRV2_CPU_RUNNER),
    "0.33": (_V1_RUNNER, _V1_CPU_RUNNER, _MRV2_RUNNER, _MRV2_CPU_RUNNER),
    "0.34": (_MRV2_RUNNER, _MRV2_CPU_RUNNER),  # 0.34 removed V1
}
_WORKERS = {
    release: ("vllm.v1.worker.gpu_worker:Worker", "vllm.v1.worker.cpu_worker:CPUWorker")
    for release in RELEASES
}
# load_weights is every model's; these stand for them in the release check (the live target and
# drafter are checked at start-up).
_MODELS = {
    release: (
        "vllm.model_executor.models.llama:LlamaForCausalLM",
        "vllm.model_executor.models.llama_eagle:EagleLlamaForCausalLM",
        "vllm.model_executor.models.deepseek_mtp:DeepSeekMTP",
    )
    for release in RELEASES
}

WRAPPED_METHODS = (
    WrappedMethod("reload_weights", MODEL_RUNNER, "prove the head again after vLLM reloads the "
                  "weights", _RUNNERS),
    WrappedMethod("start_weight_update", WORKER, "know that a weight-transfer session of the "
                  "target began", _WORKERS),
    WrappedMethod("start_draft_weight_update", WORKER, "refuse or watch a weight-transfer "
                  "session of the drafter", _WORKERS),
    WrappedMethod("finish_weight_update", WORKER, "prove the head again where a weight-transfer "
                  "session ends", _WORKERS),
    WrappedMethod("wake_up", WORKER, "prove the head again after sleep restores the weights",
                  _WORKERS),
    WrappedMethod("shutdown", WORKER, "keep the boot's last record (the certified pick's counts) "
                  "when the engine shuts down", _WORKERS),
    WrappedMethod("load_weights", MODEL, "notice a write into the target or the drafter outside "
                  "an announced update, and prove the head before the next draft step", _MODELS),
)  # fmt: skip


# The drafter methods vLLM's DSpark speculator calls, by name, around its Markov term: the pick
# after the term (``markov_pick.MarkovTermPick``) is made in them, so each must be the drafter's.
_DSPARK = {release: ("vllm.model_executor.models.qwen3_dspark:Qwen3DSparkForCausalLM",)
           for release in RELEASES}  # fmt: skip
TERM_PICK_METHODS = (
    WrappedMethod("compute_draft_logits", MODEL, "keep the block's FP8 logits and hidden states "
                  "for the pick after the term", _DSPARK),
    WrappedMethod("markov_bias", MODEL, "take each position's Markov term as vLLM computes it",
                  _DSPARK),
    WrappedMethod("map_draft_to_target", MODEL, "hand vLLM the certified pick after the term "
                  "instead of the FP8 argmax", _DSPARK),
)  # fmt: skip

# vLLM's DSpark speculator, whose source says what else it asks of a drafter, where the drafter
# has it (``hasattr``/``getattr`` on its model): read with ``ast`` (``term_facts``), not imported.
DSPARK_SPECULATOR = _same("vllm.v1.worker.gpu.spec_decode.dspark.speculator:DSparkSpeculator")
# vLLM's rewrite of a checkpoint's config into its draft config, whose source says from which
# model types it names each MTP drafter: read with ``ast`` (``config_facts``), not imported.
DRAFT_CONFIG_REWRITE = _same("vllm.config.speculative:SpeculativeConfig.hf_config_override")


class SeamMissing(AttributeError):
    """A name the plugin reads is not where the installed vLLM should keep it."""


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def release_of(version: str) -> str:
    """``"0.34"`` of ``"0.34.0"``, ``"0.32.0+cpu"``, ``"0.33.1rc1"`` (support.py's reading)."""
    release = support.release_of(version)
    if release is None:
        raise ValueError(f"not a vLLM version: {version!r}")
    return release


@cache
def installed_release() -> str:
    import vllm

    return release_of(vllm.__version__)


def read(name: str, release: str | None = None) -> Any:
    """The value of seam ``name`` in the installed vLLM (read where ``release`` keeps it)."""
    seam = BY_NAME[name]
    where = seam.location(release or installed_release())
    try:
        return vllm_source.resolve(where)
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


def missing(release: str | None = None) -> dict[str, str]:
    """Every seam the installed vLLM lacks where the table says ``release`` keeps it -> why."""
    found = {}
    for seam in SEAMS:
        try:
            read(seam.name, release)
        except SeamMissing as exc:
            found[seam.name] = str(exc)
    for method in (*WRAPPED_METHODS, *TERM_PICK_METHODS):
        for where in method.location(release or installed_release()):
            try:
                _has_method(where, method.name)
            except (ImportError, AttributeError) as exc:
                found[f"{method.name}@{where}"] = (
                    f"vLLM {release or installed_release()} has no {where}.{method.name} (the "
                    f"{method.holder}'s method the plugin wraps to {method.why}); "
                    f"{type(exc).__name__}: {exc}"
                )
    for instance_seam in INSTANCE_SEAMS:
        where = instance_seam.location(release or installed_release())
        try:
            vllm_source.assigned_in_class(where)
        except (ImportError, AttributeError, OSError, TypeError) as exc:
            found[instance_seam.name] = (
                f"vLLM {release or installed_release()} has no {where} ({instance_seam.name}: "
                f"{instance_seam.why}); {type(exc).__name__}: {exc}"
            )
    return found


def _has_method(where: str, method: str) -> None:
    """Raise unless ``module:Class`` has a callable ``method`` (its own or inherited)."""
    if not callable(getattr(vllm_source.resolve(where), method, None)):
        raise AttributeError(f"{where.replace(':', '.')} has no method {method}")


def methods_missing_in_source(release: str) -> dict[str, str]:
    """The wrapped methods the vLLM on ``sys.path`` lacks where the table says ``release`` keeps
    them, read from its sources without importing vLLM (what ``check`` says before a start)."""
    found = {}
    for method in (*WRAPPED_METHODS, *TERM_PICK_METHODS):
        for where in method.location(release):
            module_name, _, class_name = where.partition(":")
            if not vllm_source.defined_in_source(module_name, class_name, method.name):
                found[f"{method.name}@{where}"] = (
                    f"vLLM {release} has no {where}.{method.name} (the {method.holder}'s method "
                    f"the plugin wraps to {method.why})"
                )
    return found


def method_missing(method: WrappedMethod, obj: Any, release: str | None = None) -> str | None:
    """Why ``obj`` (the live runner, worker or model) cannot have ``method`` wrapped, else None."""
    if callable(getattr(obj, method.name, None)):
        return None
    cls = f"{type(obj).__module__}.{type(obj).__qualname__}"
    return (
        f"vLLM {release or installed_release()} has no {cls}.{method.name} (the {method.holder}'s "
        f"method the plugin wraps to {method.why}): this vLLM moved a name the plugin needs "
        "(vllm_plugin/seams.py); refusing to serve a head that a weight update could change "
        "unproven"
    )


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
