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

from draft_head_fp8.families.family import Family
from draft_head_fp8.families.target_head import TARGET_HEAD, policy_inputs, without_mtp_layers

FAMILY = Family(
    name="mimo-mtp",
    title="MiMo MTP",
    drafters={"MiMoMTPModel": "vllm.model_executor.models.mimo_mtp:MiMoMTP"},
    speculative_method="mtp",
    config_from=TARGET_HEAD.folder,
    model_types=("mimo", "mimo_mtp"),
    hf_architectures=("MiMoForCausalLM", "MiMoMTPModel"),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.mimo_mtp",
    policy_inputs=policy_inputs,
    refusal=without_mtp_layers,
    draft_prefixes=lambda config: ("model.mtp_layers.",),
)
