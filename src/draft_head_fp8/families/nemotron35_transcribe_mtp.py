"""Nemotron 3.5 Transcribe MTP drafters: vLLM 0.34's ``Nemotron3_5TranscribeMTP``
(``model_executor/models/nemotron3_5_transcribe.py``), Nemotron-H's MTP class (family
``nemotron-h-mtp``) with one step after the head: its ``compute_logits`` sets the logits of every
token from ``config.speechlm_output_vocab_size`` on to -inf (the embedding rows past the trained
vocabulary, the audio placeholder among them), so the draft token is the head's argmax over the
tokens before them.

- vLLM rewrites a ``nemo_speechlm`` target (``Nemotron3_5TranscribeForConditionalGeneration``) to
  it: the draft's config is the target's decoder config, ``speechlm_output_vocab_size`` on it, run
  with ``speculative_config={"method": "mtp", "model": <target>}``.
- The head's bytes: the target's ``lm_head.weight``, handed over at the share, as for Nemotron-H.
- The step after the head is a selection, no arithmetic: the record states the suffix
  (``drafted_vocab``), and the certified pick is made over the tokens before it only (the FP8
  scan, the candidates, the rescoring and the certificate never see a masked token; docs/
  certificate.md, "A masked vocabulary suffix"). vLLM's own mask then leaves the row as it found it.
- The engine test runs text only (``language_model_only``: vLLM builds no audio tower) and
  without prefix caching (a hybrid target on a CPU, as Nemotron-H's).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from draft_head_fp8.families.family import config_value, top_value
from draft_head_fp8.families.nemotron_h_mtp import FAMILY as NEMOTRON_H
from draft_head_fp8.families.target_head import mtp_family

OUTPUT_VOCAB = "speechlm_output_vocab_size"


def decoder(config: Any) -> Any:
    """The decoder's config: NeMo's ``llm_config`` in a checkpoint's config.json (what ``check``
    reads), else the config itself (the drafter's, which vLLM makes from the decoder's)."""
    return top_value(config, "llm_config", config)


def drafted_vocab(config: Any) -> int | None:
    """The tokens the drafter may draft: vLLM masks every one from ``speechlm_output_vocab_size``
    on (its config sets it to the decoder's vocabulary, then adds 10 rows)."""
    value = config_value(config, OUTPUT_VOCAB)
    return None if value is None else int(value)


def without_mtp_layers(config: Any) -> str | None:
    if not top_value(decoder(config), "num_nextn_predict_layers", 0):
        return "the checkpoint has no MTP layers (num_nextn_predict_layers is 0 or missing)"
    return None


# NeMo's name of the target's head in NVIDIA's BF16 checkpoint: the decoder vocabulary's rows
# only; vLLM pads the masked rows with zeros at load (``_pad_vocab_rows``).
NEMO_HEAD = "llm.lm_head.weight"


def nemo_head(config: Any, folder: Path, target: Any) -> list[str]:
    """A checkpoint whose head is NeMo's tensor, not Hugging Face's ``lm_head.weight``: refused."""
    from draft_head_fp8.checkpoint import has_tensor

    if has_tensor(folder, NEMOTRON_H.head.tensor) or not has_tensor(folder, NEMO_HEAD):
        return []
    return [
        f"the target's head is NeMo's {NEMO_HEAD}, which holds the decoder vocabulary's rows "
        "only (vLLM pads the masked rows with zeros at load): no checkpoint tensor vouches for "
        f"every row the head serves; this family proves a head stored whole as "
        f"{NEMOTRON_H.head.tensor}"
    ]


FAMILY = replace(
    mtp_family(
        name="nemotron35-transcribe-mtp",
        title="Nemotron 3.5 Transcribe MTP",
        drafters={
            "Nemotron3_5TranscribeMTPModel": (
                "vllm.model_executor.models.nemotron3_5_transcribe:Nemotron3_5TranscribeMTP"
            )
        },
        model_types=("nemo_speechlm", "nemotron3_5_transcribe_mtp"),
        hf_architectures=(
            "Nemotron3_5TranscribeForConditionalGeneration",
            "Nemotron3_5TranscribeMTPModel",
        ),
        tiny="draft_head_fp8.tiny.nemotron35_transcribe_mtp",
        refusal=without_mtp_layers,
        draft_prefixes=lambda config: ("llm.mtp.",),
        head=NEMOTRON_H.head,
        cpu_engine_options={"enable_prefix_caching": False, "language_model_only": True},
    ),
    drafted_vocab=drafted_vocab,
    problems=nemo_head,
)
