"""The real engine with a real-size draft head: what the flag costs and buys end to end.

    python -m bench.real_size [--family gemma4-mtp|llama-eagle1] [--pair-dir DIR] [--max-tokens 8]

A Gemma 4 pair with the shapes that matter for the draft head and little else: the assistant's
head is 1024 x 262144 (the 26B-A4B and 31B assistants' head: 512 MiB in BF16), the target one
layer wide as the 31B (5376) with the same vocabulary. Random weights (drafts are rarely
accepted; what is measured is the head, not acceptance), built once with transformers into
``--pair-dir`` (~3.4 GB on disk). Then ``draft-head-fp8 compare``'s own code runs the engine
flag off and flag on and reads the draft head's time per call in the worker, the generation
time and the engine's peak RSS (one process: vLLM in-process at TP 1). Writes
bench/results/real_size.json and prints a table.

``--family llama-eagle1``: a drafter that reads the *target's* head, at Llama 3.1 8B's published
head shape (128256 x 4096: 1 GB in BF16). The target is one Llama layer at hidden 4096 (a narrow
MLP: only the head matters here), the EAGLE-1 draft one layer and ``fc`` at the same width, random
weights. With the flag the drafter reads a private FP8 copy of the target's head, made at vLLM's
share; flag off it reads the target's BF16 head. Writes bench/results/real_size_llama_eagle1.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import write_json
from draft_head_fp8.comparison import EngineOptions, compare, served_head_bytes
from draft_head_fp8.tiny import TinyPair, save_model, train_tokenizer
from draft_head_fp8.tiny.gemma4 import VOCAB as TOKENIZER_VOCAB
from draft_head_fp8.tiny.gemma4 import text_config_kwargs

ROOT = Path(__file__).resolve().parent.parent
VOCAB, DRAFT_HIDDEN, TARGET_HIDDEN = 262144, 1024, 5376


def build_pair(out: Path) -> TinyPair:
    import torch
    from transformers import (
        Gemma4AssistantConfig,
        Gemma4AssistantForCausalLM,
        Gemma4ForCausalLM,
        Gemma4TextConfig,
    )

    pair = TinyPair(target=out / "target", assistant=out / "assistant")
    if (pair.assistant / "config.json").exists() and (pair.target / "config.json").exists():
        return pair
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    one_layer = {
        "num_hidden_layers": 1,
        "layer_types": ["full_attention"],
        "intermediate_size": 2048,
    }
    target_config = Gemma4TextConfig(**{**text_config_kwargs(TARGET_HIDDEN, VOCAB), **one_layer})
    target_config.architectures = ["Gemma4ForCausalLM"]
    text = Gemma4TextConfig(**{**text_config_kwargs(DRAFT_HIDDEN, VOCAB), **one_layer})
    assistant_config = Gemma4AssistantConfig(
        text_config=text, backbone_hidden_size=TARGET_HIDDEN, use_ordered_embeddings=False
    )
    assistant_config.architectures = ["Gemma4AssistantForCausalLM"]
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tokenizer = Path(scratch) / "tokenizer"
        train_tokenizer(
            tokenizer, TOKENIZER_VOCAB
        )  # 2048 tokens: ids stay far inside the 262144-row vocabulary
        for config, cls, folder in (
            (target_config, Gemma4ForCausalLM, pair.target),
            (assistant_config, Gemma4AssistantForCausalLM, pair.assistant),
        ):
            with torch.device("cpu"):
                model = cls(config).to(torch.bfloat16)
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.normal_(0.0, 0.02)  # N(0, 0.02) everywhere, norms included
            save_model(model, tokenizer, folder)
            del model
    return pair


EAGLE_VOCAB, EAGLE_HIDDEN = 128256, 4096  # Llama 3.1 8B's head


def build_eagle_pair(out: Path) -> TinyPair:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from draft_head_fp8.tiny import llama_eagle1
    from draft_head_fp8.tiny.common import update_config

    pair = TinyPair(target=out / "target", assistant=out / "assistant")
    if (pair.assistant / "config.json").exists() and (pair.target / "config.json").exists():
        return pair
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    shape = {"hidden_size": EAGLE_HIDDEN, "intermediate_size": 2048, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 1,
             "max_position_embeddings": 4096, "tie_word_embeddings": False,
             "architectures": ["LlamaForCausalLM"]}  # fmt: skip
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        tokenizer = Path(scratch) / "tokenizer"
        train_tokenizer(tokenizer, TOKENIZER_VOCAB)  # ids stay far inside the 128256 rows
        target = LlamaForCausalLM(LlamaConfig(vocab_size=EAGLE_VOCAB, **shape)).to(torch.bfloat16)
        save_model(target, tokenizer, pair.target)
        del target
        # The draft is cut to one layer and fc: its own vocabulary rows are never written.
        draft = LlamaForCausalLM(LlamaConfig(vocab_size=TOKENIZER_VOCAB, **shape))
        fc = torch.randn(EAGLE_HIDDEN, 2 * EAGLE_HIDDEN) * 0.02
        llama_eagle1.save_draft(draft.to(torch.bfloat16), fc, tokenizer, pair.assistant)
        update_config(pair.assistant, vocab_size=EAGLE_VOCAB)
    return pair


PAIRS = {
    "gemma4-mtp": (build_pair, "real_size.json",
                   {"vocab": VOCAB, "draft_hidden": DRAFT_HIDDEN, "target_hidden": TARGET_HIDDEN}),
    "llama-eagle1": (build_eagle_pair, "real_size_llama_eagle1.json",
                     {"vocab": EAGLE_VOCAB, "draft_hidden": EAGLE_HIDDEN,
                      "target_hidden": EAGLE_HIDDEN, "head": "the target's, shared"}),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=sorted(PAIRS), default="gemma4-mtp")
    parser.add_argument("--pair-dir", type=Path, default=None)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    build, results, shape = PAIRS[args.family]
    args.pair_dir = args.pair_dir or Path(tempfile.gettempdir()) / f"dhfp8-real-{args.family}"
    args.out = args.out or ROOT / "bench" / "results" / results
    started = time.perf_counter()
    print(f"building (once) the real-size pair in {args.pair_dir} ...", flush=True)
    pair = build(args.pair_dir)
    prompts = ["Return a new list containing", "This module provides", "The default value is"]
    options = EngineOptions(
        prompts=prompts[: args.prompts],
        max_tokens=args.max_tokens,
        kv_cache_memory_bytes=256 << 20,
        draft_agreement=False,  # it would hold a second BF16 head and blur the memory figures
    )
    scratch = Path(tempfile.mkdtemp(prefix="dhfp8-real-run-"))
    facts = compare(
        pair.target,
        pair.assistant,
        options,
        cache=scratch,
        archive_root=scratch / "archive",
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    off, on = facts["figures"]["flag_off"], facts["figures"]["flag_on"]
    receipt = facts["receipt"]["document"]
    result = {
        "schema": "draft-head-fp8-bench-real-size/v1",
        "family": args.family,
        "pair": shape,
        "options": facts["options"],
        "flag_off": off,
        "flag_on": on,
        "head_ms_ratio": on["draft_head_ms_per_call"] / off["draft_head_ms_per_call"],
        "peak_rss_delta_bytes": on["peak_rss_bytes"] - off["peak_rss_bytes"],
        "texts_identical": facts["texts_identical"],
        "spec_decode_identical": facts["spec_decode_identical"],
        "receipt_valid": facts["receipt"]["valid"],
        "receipt_schema": receipt["schema"],
        "head_kernel": receipt["head_kernel"],
        "head_bytes": {
            "bf16": served_head_bytes(facts["flag_off"]["after_start"]["receipt"]),
            "fp8": served_head_bytes(receipt),
        },  # fmt: skip
        "exact_pick": facts["diagnostics"]["exact_pick"]["guarantee"],
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    write_json(args.out, result)
    gib = 2**30
    print("| | flag off (BF16 head) | flag on (FP8 head) | on / off |")
    print("|---|---|---|---|")
    print(
        f"| draft head per call (compute_logits, worker median) | "
        f"{off['draft_head_ms_per_call']:.1f} ms | {on['draft_head_ms_per_call']:.1f} ms | "
        f"{result['head_ms_ratio']:.2f} |"
    )
    print(
        f"| generation ({off['generated_tokens']} tokens) | {off['generate_seconds']:.1f} s | "
        f"{on['generate_seconds']:.1f} s | {on['generate_seconds'] / off['generate_seconds']:.2f} |"
    )
    print(
        f"| peak RSS | {off['peak_rss_bytes'] / gib:.2f} GiB | "
        f"{on['peak_rss_bytes'] / gib:.2f} GiB "
        f"| {result['peak_rss_delta_bytes'] / gib:+.2f} GiB |"
    )
    print(
        f"receipt {result['receipt_schema'].rsplit('/', 1)[-1]} valid: {result['receipt_valid']}; "
        f"kernel {result['head_kernel']}; texts identical: {result['texts_identical']}; "
        f"counters identical: {result['spec_decode_identical']}; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
