"""Step 3.5 MTP drafters: several heads per drafter, one in each draft layer.

- vLLM: ``Step3p5MTP`` (``model_executor/models/step3p5_mtp.py``); vLLM rewrites a ``step3p5``
  (or ``step3p7``) target config to it (``SpeculativeConfig``: ``n_predict`` the config's
  ``num_nextn_predict_layers``), run with ``speculative_config={"method": "mtp", "model":
  <target>}``. The MTP layers ship inside the target's checkpoint, after its own
  (``model.layers.{num_hidden_layers + i}.*``); with two or more of them and as many draft tokens,
  Model Runner V2 drafts with ``MultiModuleMTPSpeculator``, step ``i`` through layer ``i mod n``.
- Its heads: each MTP layer keeps a ``shared_head.head`` of its own (``has_own_lm_head = True``),
  loaded from that layer's ``shared_head.output.weight`` (vLLM renames it on load), and
  ``compute_logits`` hands the logits processor the head of the layer the step drafts with. The
  drafter has no top-level ``lm_head``, so vLLM's share (``eagle/utils.py``: ``_should_share``
  keeps the draft's own copy where it has no top-level one) never replaces them by the target's,
  even where they hold the same bytes: every one is the drafter's own, made FP8 at load from its
  own tensor, its picks certified against its own BF16 rows, and proven one by one in the receipt
  (``heads``: which module path, which draft steps, which checkpoint tensor).
- The share vLLM performs is the embedding's (``embed_tokens``: the target's replaces the draft's),
  where the receipt is captured, as for a drafter that keeps its own head.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import AT_LOAD, DRAFT, TARGET, Family, HeadSource, top_value
from draft_head_fp8.families.target_head import layers_after_the_target, without_mtp_layers

# Each MTP layer's head: its checkpoint tensor and its module in vLLM's drafter.
HEAD_TENSOR = "model.layers.{layer}.shared_head.output.weight"
HEAD_PATH = "model.layers.{layer}.shared_head.head"
# The draft's folder is the target's (the MTP layers ship in it): ``DRAFT`` is where vLLM loads
# them from. Without a folder to read, the tensor named is layer 0's.
HEAD = HeadSource(folder=DRAFT, tensor=HEAD_TENSOR.format(layer=0), when=AT_LOAD)


def mtp_layer_indices(config: Any) -> range:
    first = int(top_value(config, "num_hidden_layers", 0))
    return range(first, first + int(top_value(config, "num_nextn_predict_layers", 0)))


def layer_heads(config: Any) -> tuple[tuple[str, str], ...]:
    """Every MTP layer's head, in draft-step order: (its module path, its checkpoint tensor)."""
    return tuple(
        (HEAD_PATH.format(layer=i), HEAD_TENSOR.format(layer=i)) for i in mtp_layer_indices(config)
    )


def head_for(draft_folder: Path) -> HeadSource:
    """The first MTP layer's head, as the folder's config places it (the one ``check`` and the
    estimate read; the drafter serves every one of ``layer_heads``)."""
    from draft_head_fp8.checkpoint import read_config

    heads = layer_heads(read_config(draft_folder))
    return replace(HEAD, tensor=heads[0][1]) if heads else HEAD


def policy_inputs(config: Any) -> dict[str, Any]:
    return {
        "ordered_embeddings": False,
        "tie_word_embeddings": bool(top_value(config, "tie_word_embeddings", False)),
    }


FAMILY = Family(
    name="step3p5-mtp",
    title="Step 3.5 MTP",
    drafters={"Step3p5MTP": "vllm.model_executor.models.step3p5_mtp:Step3p5MTP"},
    speculative_method="mtp",
    config_from=TARGET,
    model_types=("step3p5", "step3p5_mtp"),
    hf_architectures=("Step3p5ForCausalLM", "Step3p5MTP"),
    head=HEAD,
    head_for=head_for,
    share="embed_tokens",
    tiny="draft_head_fp8.tiny.step3p5_mtp",
    policy_inputs=policy_inputs,
    refusal=without_mtp_layers,
    draft_prefixes=layers_after_the_target,
    layer_heads=layer_heads,
)
