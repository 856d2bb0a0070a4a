"""HY V4 MTP drafters: vLLM's ``HYV4MTP`` (``vllm/models/hy_v4/nvidia/mtp.py``; the platform
entry ``vllm.models.hy_v4`` imports it on every platform, there being no other) reads its head
as Hy3's (``hy_v3_mtp``) does: the MTP layer ships inside the target's checkpoint
(``model.mtp_layers.{i}.*``, or ``model.layers.{num_hidden_layers + i}.*``: an HY V4 decoder
block, built without iHC, beside ``enorm``, ``hnorm``, ``eh_proj`` and ``final_layernorm``), and
its logits come from the MTP layer's ``shared_head.head``, loaded from the target's
``lm_head.weight`` and replaced by the target's head at the share; what differs is data: vLLM's
class, the model types, and where the MTP layers sit.

- vLLM rewrites a ``hy_v4`` config to it, run with ``speculative_config={"method": "mtp",
  "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; the private FP8
  head is made there and given to every reference.
- HY V4 computes its head's logits in float32 by default (``enable_lm_head_fp32``, which vLLM's
  config turns into ``head_dtype="float32"``): vLLM's logits processor then multiplies the
  head's weight cast to float32 and never calls the head's method, so neither an FP8 head nor
  its exact pick (the BF16 head's argmax) can serve it: refused, with what serves it instead
  (``head_dtype`` "model" in config.json: vLLM 0.34 gives the draft the target's callable
  ``hf_overrides`` but not a dict of them, ``SpeculativeConfig.compose_draft_hf_overrides``).
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import top_value
from draft_head_fp8.families.target_head import mtp_family, without_mtp_layers

FP32_HEAD = (
    "the head's logits are float32 (enable_lm_head_fp32, vLLM's head_dtype float32): vLLM then "
    "projects the head's weight cast to float32, never through the head's method (it refuses "
    "any method but the unquantized ones there), and the exact pick proves the BF16 head's "
    'argmax, not the float32 one; serve it with head_dtype "model" in its config.json (the '
    "target's logits then BF16 too; a --hf-overrides dict does not reach the draft), or with "
    "the flag unset"
)


def fp32_head(config: Any) -> bool:
    """Whether vLLM computes this config's head in float32: its ``head_dtype`` where it names
    one, else ``enable_lm_head_fp32`` (true unless the checkpoint says false)."""
    head_dtype = top_value(config, "head_dtype")
    if head_dtype is not None:
        return str(head_dtype).removeprefix("torch.").lower() in ("float32", "fp32", "float")
    return bool(top_value(config, "enable_lm_head_fp32", True))


def refusal(config: Any) -> str | None:
    """An FP32 head; or MTP layers counted as none (vLLM's config counts one where the checkpoint
    says nothing)."""
    if fp32_head(config):
        return FP32_HEAD
    if top_value(config, "num_nextn_predict_layers") is None:
        return None
    return without_mtp_layers(config)


def mtp_layers(config: Any) -> tuple[str, ...]:
    count = max(int(top_value(config, "num_nextn_predict_layers", 1)), 1)
    return tuple(f"model.mtp_layers.{i}." for i in range(count))


FAMILY = mtp_family(
    name="hy-v4-mtp",
    title="HY V4 MTP",
    drafters={"HYV4MTPModel": "vllm.models.hy_v4.nvidia.mtp:HYV4MTP"},
    model_types=("hy_v4", "hy_v4_mtp"),
    hf_architectures=("HYV4ForCausalLM", "HYV4MTPModel"),
    tiny="draft_head_fp8.tiny.hy_v4_mtp",
    refusal=refusal,
    draft_prefixes=mtp_layers,
)
