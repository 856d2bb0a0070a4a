"""Tiny real Nemotron 3.5 Transcribe checkpoints with one MTP layer (family
``nemotron35-transcribe-mtp``): one folder, the speech LM and its MTP layer together, as NVIDIA
ships them; bf16 safetensors plus a tokenizer trained here, built in seconds, no network. Random
weights.

- The config is NeMo's SpeechLM form, which vLLM reads with its own ``Nemotron3_5TranscribeConfig``
  (model type ``nemo_speechlm``): the decoder under ``llm_config`` (a Nemotron-H config, as
  ``tiny/nemotron_h_mtp.py``'s: an attention and an MLP block, no Mamba-2), no ``perception``. vLLM
  then adds 10 embedding rows past the decoder's vocabulary (``SPEECHLM_EMBED_EXTRA_ROWS``: the
  audio placeholder lives there) and keeps the decoder's as ``speechlm_output_vocab_size``; the
  target and its MTP drafter set the logits of those 10 tokens to -inf after the head.
- No audio tower's tensors: the engine runs text only (``language_model_only``), where vLLM makes
  the tower on the meta device and loads no ``perception.*`` tensor. Its constructor still reads
  the whole audio config, so ``perception`` and ``pe_encoder_config`` hold the smallest one vLLM's
  config accepts (``AUDIO``: one-layer transformer ASR and speaker encoders of width 32); a run
  with audio would need the tower's tensors, which this pair leaves out.
- The tensors under Hugging Face names (``backbone.*``, ``lm_head.weight``; vLLM's mapper reads
  them as the FP8 checkpoints name them), the MTP layer under NeMo's ``llm.mtp.layers.0.*``,
  which is where ``Nemotron3_5TranscribeMTP.load_weights`` reads it.
- The head and the embedding hold all ``vocab + 10`` rows. NVIDIA's BF16 checkpoint holds the
  head as NeMo's ``llm.lm_head.weight``, ``vocab`` rows, and vLLM pads the 10 with zeros at load;
  the plugin hashes every real row of the head against a checkpoint tensor, so the family refuses
  that layout (``nemotron35_transcribe_mtp.nemo_head``), never serving bytes no file vouches for.
- The 10 masked rows of the head lie along a direction every draft hidden state shares, so that
  the draft head's best tokens, BF16 and FP8, are often all masked ones, and the drafted rows come
  in twins (``_masked_rows_ahead``): a pick that let the masked tokens take its candidates would
  leave vLLM's mask the plain FP8 scan, which often drafts the other twin. The pick must be the
  BF16 head's best token before the suffix, the one vLLM's mask leaves the draft.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from draft_head_fp8.tiny import nemotron_h_mtp as nemotron_h
from draft_head_fp8.tiny.common import (
    SMALL_TEXT,
    TinyPair,
    empty_folder,
    rewrite_weights,
    save_model,
    train_tokenizer,
)
from draft_head_fp8.tiny.qwen3_dflash import twin_rows

ARCHITECTURE = "Nemotron3_5TranscribeForConditionalGeneration"
# vLLM's SPEECHLM_EMBED_EXTRA_ROWS: the rows after the trained output vocabulary.
EXTRA_ROWS = 10
VOCAB = SMALL_TEXT["vocab_size"]  # the head's rows, the masked ones included
OUTPUT_VOCAB = VOCAB - EXTRA_ROWS  # the decoder's vocabulary: the tokens that are drafted
HIDDEN = SMALL_TEXT["hidden_size"]
# The embedding rows' shared component and the masked head rows' norm: on the engine the best
# token of 60 of 84 draft rows is a masked one (a torch model of the MTP step put the 8 best all
# masked on about a third of the rows).
SHARED_EMBEDDING, MASKED_ROWS = 0.5, 0.12
VARIANTS: dict[str, str] = {}
# The smallest audio config vLLM's ``resolve_audio_config`` accepts (NeMo's keys; the rest its
# defaults): what the tower's constructor reads.
_ENCODER = {
    "feat_in": 64,
    "d_model": 32,
    "n_heads": 2,
    "n_layers": 1,
    "self_attention_model": "rope",
}
AUDIO = {
    "perception": {
        "preprocessor": {"sample_rate": 16000, "features": 64, "normalize": "NA"},
        "modality_adapter": {"_target_": "IdentityConnector", "d_model": _ENCODER["d_model"]},
        "output_dim": SMALL_TEXT["hidden_size"],
    },
    "pe_encoder_config": {
        "asr_encoder_type": "transformer",
        "asr_encoder_cfg": _ENCODER,
        "diarization_model_cfg": {
            "encoder": _ENCODER,
            "high_resolution": True,
            "sortformer_modules": {
                "use_learnable_sil_emb": True,
                "fc_d_model": 32,
                "tf_d_model": 32,
            },
        },
        "speaker_feature_mode": "continuous",
    },
}


def _masked_rows_ahead(seed: int):
    """An edit: the MTP layer under NeMo's names; the drafted rows of the head in twins
    (``qwen3_dflash.twin_rows``: the plain FP8 argmax among them is often the other twin); every
    embedding row given one shared component, which the MTP layer's projection carries into every
    draft hidden state along one direction, and the masked rows of the head laid along it
    (``MASKED_ROWS``), so that on most draft rows the head's best tokens are masked ones, on many
    more of them than the pick has candidates."""
    import torch

    def edit(tensors: dict) -> dict:
        tensors = twin_rows(seed)(nemotron_h.mtp_layer_glue(seed)(tensors))
        gen = torch.Generator().manual_seed(seed + 23)
        shared = torch.nn.functional.normalize(torch.randn(HIDDEN, generator=gen), dim=0)
        embed = tensors["backbone.embeddings.weight"].float() + SHARED_EMBEDDING * shared
        tensors["backbone.embeddings.weight"] = embed.to(torch.bfloat16)
        # The embedding's half of the projection: torch.cat([enorm(embed), hnorm(hidden)]).
        onto = tensors["mtp.layers.0.eh_proj.weight"][:, :HIDDEN].float() @ shared
        along = torch.nn.functional.normalize(onto, dim=0)
        head = tensors["lm_head.weight"].float()
        noise = torch.randn(EXTRA_ROWS, HIDDEN, generator=gen) * 0.01
        head[OUTPUT_VOCAB:] = MASKED_ROWS * along + noise
        tensors["lm_head.weight"] = head.to(torch.bfloat16)
        return {("llm." + k if k.startswith("mtp.") else k): t for k, t in tensors.items()}

    return edit


def _nemo_config(folder: Path) -> None:
    """The saved Nemotron-H config becomes NeMo's ``llm_config`` with the decoder's vocabulary."""
    path = folder / "config.json"
    decoder = json.loads(path.read_text())
    decoder.update(
        vocab_size=OUTPUT_VOCAB,
        layers_block_type=nemotron_h.BLOCKS,
        num_hidden_layers=len(nemotron_h.BLOCKS),
        num_nextn_predict_layers=1,
        architectures=["NemotronHForCausalLM"],
    )
    for key in ("transformers_version", "dtype", "torch_dtype"):
        decoder.pop(key, None)
    config = {
        "architectures": [ARCHITECTURE],
        "model_type": "nemo_speechlm",
        "llm_config": decoder,
        "torch_dtype": "bfloat16",
        **AUDIO,
    }
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build(out: str | os.PathLike, *, seed: int = 0) -> TinyPair:
    """Write ``out/target`` (the speech LM with its MTP layer). Refuses a folder with files."""
    import torch
    from transformers import NemotronHForCausalLM

    out = Path(out)
    torch.manual_seed(seed)
    model = NemotronHForCausalLM(nemotron_h.config(tied=False))
    target = empty_folder(out / "target")
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tokenizer = Path(scratch) / "tokenizer"
        train_tokenizer(tokenizer, VOCAB)
        save_model(model, tokenizer, target)
    rewrite_weights(target, _masked_rows_ahead(seed))
    _nemo_config(target)
    return TinyPair(target=target, assistant=target)
