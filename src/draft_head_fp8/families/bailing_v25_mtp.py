"""Bailing MoE V2.5 MTP drafters (Ling/Ring 2.5): vLLM's ``BailingMoeV25MTPModel``
(``model_executor/models/bailing_moe_mtp.py``) reads its head as DeepSeek-V3's does
(``deepseek_v3_mtp``): the MTP layer ships inside the target's checkpoint
(``model.layers.{num_hidden_layers + i}.*``: an MLA and MoE block beside ``enorm``, ``hnorm``,
``eh_proj`` and ``final_layernorm``), each MTP layer's ``shared_head.head`` is loaded from the
target's ``lm_head.weight`` (no copy in the checkpoint), and vLLM's share installs the target's
head as the drafter's ``lm_head``, which its ``compute_logits`` reads first; what differs is
data: vLLM's class, the model types, the architectures.

- vLLM rewrites a config of model type ``bailing_hybrid`` or architecture
  ``BailingMoeV2_5ForCausalLM`` to it (``bailing_hybrid_mtp``; a ``BailingMoeV3ForCausalLM``
  is V3's, ``bailing_v3_mtp``), run with ``speculative_config={"method": "mtp",
  "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share; Bailing names its
  embedding ``model.word_embeddings.weight``.
- Real checkpoints load their configuration with remote code (``auto_map``, model type
  ``bailing_hybrid``): vLLM runs them with ``trust_remote_code``; the flag reads config.json.
- On a CPU, vLLM 0.34 starts no real Bailing target, flag off too: a hybrid MLA target's KV
  blocks are aligned to 128 tokens where its CPU MLA takes 16 (the tiny target, whose
  linear-attention state is empty, runs: ``tiny/bailing_v25_mtp.py``).
"""

from __future__ import annotations

from dataclasses import replace

from draft_head_fp8.families.target_head import TARGET_HEAD, mtp_family

# vLLM treats a Bailing target as hybrid (its linear attention's state): prefix caching on gives
# its state a block size, and then vLLM's CPU platform turns prefix caching off for MLA and
# refuses the two together ("--mamba-block-size can only be set with --enable-prefix-caching",
# measured flag off); off from the start, the state spans the whole sequence.
HYBRID_MLA_ON_CPU = {"enable_prefix_caching": False}
# Bailing's embedding, where a tied head's bytes would be.
BAILING_HEAD = replace(TARGET_HEAD, tied_tensor="model.word_embeddings.weight")

FAMILY = mtp_family(
    name="bailing-v25-mtp",
    title="Bailing MoE V2.5 MTP",
    drafters={
        "BailingMoeV25MTPModel": (
            "vllm.model_executor.models.bailing_moe_mtp:BailingMoeV25MTPModel"
        )
    },
    model_types=("bailing_hybrid", "bailing_hybrid_mtp"),
    hf_architectures=("BailingMoeV2_5ForCausalLM", "BailingMoeV25MTPModel"),
    tiny="draft_head_fp8.tiny.bailing_v25_mtp",
    head=BAILING_HEAD,
    cpu_engine_options=HYBRID_MLA_ON_CPU,
)
