"""DeepSeek-V3 MTP drafters: the MTP layer ships inside the target's checkpoint
(``model.layers.{num_hidden_layers}.*``), and the draft reads the target's head through two
references: ``lm_head`` and the MTP layer's ``shared_head.head``.

- vLLM: ``DeepSeekMTP`` (``model_executor/models/deepseek_mtp.py``, architecture
  ``DeepSeekMTPModel``; vLLM rewrites a ``deepseek_v3`` config to it), run with
  ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head). The checkpoint's MTP layer carries a copy (``shared_head.head``), which the drafter
  loads and vLLM's proposer then deletes, assigning the target's head to every reference
  (``_maybe_share_lm_head``); so the private FP8 head is made at the share, from this rank's rows
  of the target's head, and handed to each reference.
- The share the plugin sees: ``head`` registered on each MTP layer's ``shared_head``.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8.families.family import AT_SHARE, TARGET, Family, HeadSource, top_value


def policy_inputs(config: Any) -> dict[str, Any]:
    return {
        "ordered_embeddings": False,
        "tie_word_embeddings": bool(top_value(config, "tie_word_embeddings", False)),
        "shared_target_head": True,
    }


def refusal(config: Any) -> str | None:
    if not top_value(config, "num_nextn_predict_layers", 0):
        return "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"
    return None


def mtp_layers(config: Any) -> tuple[str, ...]:
    """The MTP layers follow the target's: ``model.layers.{num_hidden_layers + i}.``"""
    first = int(top_value(config, "num_hidden_layers", 0))
    count = int(top_value(config, "num_nextn_predict_layers", 0))
    return tuple(f"model.layers.{i}." for i in range(first, first + count))


FAMILY = Family(
    name="deepseek-v3-mtp",
    title="DeepSeek-V3 MTP",
    drafters={"DeepSeekMTPModel": "vllm.model_executor.models.deepseek_mtp:DeepSeekMTP"},
    speculative_method="mtp",
    config_from=TARGET,
    model_types=("deepseek_v3", "deepseek_mtp"),
    hf_architectures=("DeepseekV3ForCausalLM", "DeepSeekMTPModel"),
    head=HeadSource(
        folder=TARGET,
        tensor="lm_head.weight",
        when=AT_SHARE,
        tied_tensor="model.embed_tokens.weight",
    ),
    share="lm_head",
    tiny="draft_head_fp8.tiny.deepseek_v3_mtp",
    policy_inputs=policy_inputs,
    refusal=refusal,
    draft_prefixes=mtp_layers,
)
