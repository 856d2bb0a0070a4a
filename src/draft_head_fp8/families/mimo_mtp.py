"""MiMo MTP drafters: the MTP layers ship inside the target's checkpoint
(``model.mtp_layers.{i}.*`` of a ``MiMoForCausalLM``), and the draft reads the target's head.

- vLLM: ``MiMoMTP`` (``model_executor/models/mimo_mtp.py``, architecture ``MiMoMTPModel``; vLLM
  rewrites the target config's ``MiMoForCausalLM`` to it), run with
  ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight`` (its embedding where the target ties its
  head), in the target's folder. The drafter loads a BF16 copy of them into its own
  ``ParallelLMHead``; vLLM's proposer then deletes that copy and assigns the target's head
  (``_maybe_share_lm_head``), so the bytes that serve exist only at the share: the private FP8
  head is made there, from this rank's rows of the target's head.
- The share the plugin sees: ``lm_head`` registered on the drafter.
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


FAMILY = Family(
    name="mimo-mtp",
    title="MiMo MTP",
    drafters={"MiMoMTPModel": "vllm.model_executor.models.mimo_mtp:MiMoMTP"},
    speculative_method="mtp",
    config_from=TARGET,
    model_types=("mimo", "mimo_mtp"),
    hf_architectures=("MiMoForCausalLM", "MiMoMTPModel"),
    head=HeadSource(
        folder=TARGET,
        tensor="lm_head.weight",
        when=AT_SHARE,
        tied_tensor="model.embed_tokens.weight",
    ),
    share="lm_head",
    tiny="draft_head_fp8.tiny.mimo_mtp",
    policy_inputs=policy_inputs,
    refusal=refusal,
    draft_prefixes=lambda config: ("model.mtp_layers.",),
)
