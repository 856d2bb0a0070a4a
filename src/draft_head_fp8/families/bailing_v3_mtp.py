"""Bailing MoE V3 MTP drafters (Ling 3.0): vLLM's ``BailingMoeV3MTPModel``
(``model_executor/models/bailing_moe_v3_mtp.py``) reads its head as V2.5's
(``bailing_v25_mtp``) and DeepSeek-V3's do: the MTP layer ships inside the target's checkpoint
(``model.layers.{num_hidden_layers + i}.*``), each MTP layer's ``shared_head.head`` is loaded
from the target's ``lm_head.weight``, and vLLM's share installs the target's head as the
drafter's ``lm_head``, which its ``compute_logits`` reads first; what differs is data: vLLM's
class, the model type, the architecture.

- vLLM rewrites a config whose first architecture is ``BailingMoeV3ForCausalLM`` to it
  (``bailing_hybrid_v3_mtp``; its model type is ``bailing_hybrid``, as V2.5's, so the
  architecture tells them apart), run with ``speculative_config={"method": "mtp",
  "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share.
- Real checkpoints load their configuration with remote code, and vLLM 0.34's CPU engine starts
  none of them (the hybrid MLA blocks, as V2.5's): the tiny target's KDA state is empty
  (``tiny/bailing_v3_mtp.py``). The multimodal V3 (``BailingMoeV3VLForConditionalGeneration``,
  whose text config vLLM hands the drafter) is not engine-tested here: not this record's.
"""

from __future__ import annotations

from draft_head_fp8.families.bailing_v25_mtp import BAILING_HEAD, HYBRID_MLA_ON_CPU
from draft_head_fp8.families.target_head import mtp_family

FAMILY = mtp_family(
    name="bailing-v3-mtp",
    title="Bailing MoE V3 MTP",
    drafters={
        "BailingMoeV3MTPModel": (
            "vllm.model_executor.models.bailing_moe_v3_mtp:BailingMoeV3MTPModel"
        )
    },
    model_types=("bailing_hybrid_v3_mtp",),
    hf_architectures=("BailingMoeV3ForCausalLM", "BailingMoeV3MTPModel"),
    tiny="draft_head_fp8.tiny.bailing_v3_mtp",
    head=BAILING_HEAD,
    cpu_engine_options=HYBRID_MLA_ON_CPU,
)
