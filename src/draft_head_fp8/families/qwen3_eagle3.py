"""Qwen3 EAGLE-3 drafters: vLLM's own EAGLE-3 class for Qwen3 (``Eagle3Qwen3ForCausalLM``,
``model_executor/models/qwen3_eagle3.py``), one Qwen3 decoder layer (its attention with
``q_norm``/``k_norm``) whose attention reads ``2 x hidden``, ``fc`` over three of the target's
hidden states, and a head of its own or none: the head is read exactly as Llama EAGLE-3's is
(``llama_eagle3.eagle3_family``; this family differs from that one only in data).

- vLLM builds it for a draft config naming ``Eagle3Qwen3ForCausalLM``, or naming
  ``Qwen3ForCausalLM`` under ``speculative_config={"method": "eagle3"}`` (``EAGLEConfig`` prefixes
  ``Eagle3``). Its ``compute_logits`` is Llama EAGLE-3's (``logits_processor(lm_head, h)``, then
  ``d2t`` maps draft ids to target ids), and its ``get_top_tokens`` (vLLM's local argmax
  reduction) asks ``logits_processor.get_top_tokens`` of the same head.
- Its own head (``lm_head.weight``, ``draft_vocab_size`` rows): made FP8 at load, the share the
  plugin sees is ``embed_tokens`` (vLLM hands the draft the target's embedding). None: the
  target's head, shared, a private FP8 copy made at the share. Both run on vLLM 0.34's engine
  with a tiny Qwen3 target (``tiny/qwen3_eagle3.py``).
- vLLM 0.32's ``PeagleQwen3ForCausalLM`` builds the same class for P-EAGLE's parallel drafting,
  which drafts differently: not this family's (refused, ``vllm_plugin/unserved.py``).
"""

from __future__ import annotations

from draft_head_fp8.families.llama_eagle3 import eagle3_family

FAMILY = eagle3_family(
    name="qwen3-eagle3",
    title="Qwen3 EAGLE-3",
    vllm_class="vllm.model_executor.models.qwen3_eagle3:Eagle3Qwen3ForCausalLM",
    architectures=("Eagle3Qwen3ForCausalLM",),
    bases=("Qwen3ForCausalLM",),
    model_types=("qwen3",),
    tiny="draft_head_fp8.tiny.qwen3_eagle3",
)
