"""Nemotron-H MTP drafters (Nemotron 3 Super and its siblings): the MTP layers ship inside the
target's checkpoint (``mtp.layers.*``), and the draft reads the target's head through ``lm_head``;
it has no head and no embedding of its own (``has_own_lm_head`` and ``has_own_embed_tokens`` are
False): vLLM's proposer hands it the target's, so the head exists on the drafter only from the
share, as for the EAGLE-1 drafters that read the target's head.

- vLLM: ``NemotronHMTP`` (``model_executor/models/nemotron_h_mtp.py``, architecture
  ``NemotronHMTPModel``; vLLM rewrites a ``nemotron_h`` config with
  ``num_nextn_predict_layers > 0`` to it), run with ``speculative_config={"method": "mtp",
  "model": <target>}``. One MTP step of ``mtp_layers_block_type`` blocks (attention, MoE).
- The head's bytes: the target's ``lm_head.weight``; Nemotron-H names its embedding
  ``backbone.embeddings.weight`` in its checkpoints, which is where a tied head's bytes are.
"""

from __future__ import annotations

from dataclasses import replace

from draft_head_fp8.families.target_head import TARGET_HEAD, mtp_family

FAMILY = mtp_family(
    name="nemotron-h-mtp",
    title="Nemotron-H MTP",
    drafters={"NemotronHMTPModel": "vllm.model_executor.models.nemotron_h_mtp:NemotronHMTP"},
    model_types=("nemotron_h", "nemotron_h_mtp"),
    hf_architectures=("NemotronHForCausalLM", "NemotronHMTPModel"),
    tiny="draft_head_fp8.tiny.nemotron_h_mtp",
    draft_prefixes=lambda config: ("mtp.",),
    head=replace(TARGET_HEAD, tied_tensor="backbone.embeddings.weight"),
    # vLLM treats the target as a hybrid (Mamba) model: on a CPU no prefix caching (its mamba
    # "align" cache mode calls a Triton kernel), as for Qwen3-Next.
    cpu_engine_options={"enable_prefix_caching": False},
)
