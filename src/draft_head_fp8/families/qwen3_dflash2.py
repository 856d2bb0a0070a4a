"""Qwen3 DFlash2 drafters: vLLM 0.34's ``DFlash2Qwen3ForCausalLM`` (``model_executor/models/
qwen3_dflash2.py``), Qwen3 DFlash's block drafter (``families/qwen3_dflash.py``) with grouped
convolutions around each layer's attention and MLP, and a candidate selector in place of the
argmax. vLLM's ``DFlash2Speculator`` (Model Runner V2; ``v1/worker/gpu/spec_decode/dflash2/``)
calls the head once per step over every request x position (``compute_candidates`` ->
``LogitsProcessor.get_top_k_tokens(lm_head, h, selector_top_k)`` -> the head method's
``apply``, then ``torch.topk(K)``), then scores those K ids with their values
(``candidate_selector``: the value plus a low-rank edge to each candidate one position back;
``output_multiplier`` and ``final_logit_softcapping`` applied to the K values only) and walks
them (``_selector_walk_kernel``: Gumbel-noised argmax, noise only when drafting is
probabilistic).

- The draft tokens are a function of the K ids and their values alone: the head hands
  ``torch.topk`` exact top-K rows (``top_k``: the draft's ``dflash_config["selector_top_k"]``,
  where vLLM reads it; ``top_k_rows``), so vLLM's own ``topk`` returns the BF16 head's ids
  and values, bit for bit, and the selector, the walk and the draft-logits cache (written from
  the K only) see what they see with the flag off.
- Probabilistic drafting is served as greedy is: the walk's noise is seeded per request and
  position, the same flag off and on, and its input is exact; vLLM's rejection sampler reads
  the draft logits the walk cached from those same K values.
- ``return_log_probs`` (the values less the whole row's logsumexp, which FP8 cannot give
  exactly) is never asked by this class (LiLiCorr's asks it; not served here).
- The head: the target's ``lm_head``, shared at load (``load_dflash_model``) when the draft
  checkpoint has none, as for Qwen3 DFlash. Refused (``refusal``): a config saying
  ``has_own_lm_head``, or one naming no ``selector_top_k``. A vocabulary of its own is refused
  at the share by the policy.
- ``DFlash2RicursiveDraftModel`` (``ricursive_dflash2.py``: NoPE layers, the same
  ``compute_candidates``) is served by this record, not engine-tested here.
- Runs on vLLM 0.34's engine with a tiny Qwen3 target (``tiny/qwen3_dflash2.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import DRAFT, Family, config_value
from draft_head_fp8.families.target_head import TARGET_HEAD, own_head_refusal, policy_inputs

MODELS = "vllm.model_executor.models"
DRAFTERS = {
    "DFlash2DraftModel": f"{MODELS}.qwen3_dflash2:DFlash2Qwen3ForCausalLM",
    "DFlash2RicursiveDraftModel": f"{MODELS}.ricursive_dflash2:RicursiveDFlash2ForCausalLM",
}
TOP_K_KEY = "selector_top_k"  # DFlash2Speculator._candidate_top_k_key


def _flash(config: Any) -> dict:
    flash = config_value(config, "dflash_config") or {}
    return flash if isinstance(flash, dict) else {}


def top_k(config: Any) -> int | None:
    """How many of the head's best tokens the selector reads (vLLM: ``int(dflash_config[
    "selector_top_k"])``, for the speculator and the selector alike)."""
    value = _flash(config).get(TOP_K_KEY)
    return None if value is None else int(value)


def refusal(config: Any) -> str | None:
    own = own_head_refusal(config, "DFlash2")
    if own:
        return own
    top = top_k(config)
    if top is None or top < 1:
        return (
            f"a DFlash2 draft whose dflash_config names no {TOP_K_KEY} >= 1 ({top}): the head's "
            "exact top-K is served for the K the candidate selector reads, and none is said"
        )
    return None


def recognise(config: Any, folder: Path) -> bool:
    """A DFlash2 draft: its ``dflash_config`` names the selector's K (a DFlash draft's does not)."""
    return _flash(config).get(TOP_K_KEY) is not None


FAMILY = Family(
    name="qwen3-dflash2",
    title="Qwen3 DFlash2",
    drafters=DRAFTERS,
    speculative_method="dflash",  # vLLM names DFlash2 drafts by architecture, not method
    config_from=DRAFT,
    model_types=("qwen3",),
    hf_architectures=tuple(DRAFTERS),
    head=TARGET_HEAD,
    share="lm_head",
    tiny="draft_head_fp8.tiny.qwen3_dflash2",
    policy_inputs=policy_inputs,
    refusal=refusal,
    recognise=recognise,
    drafts_block=True,
    top_k=top_k,
)
