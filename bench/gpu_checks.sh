#!/usr/bin/env bash
# The GPU checks as one prepared run (meant to fit 8 minutes; the fused kernel's part is not yet
# timed), for a lent machine with torch + CUDA and no vLLM (the device tool copies the working
# tree only): quantizing a 262144 x 1024 head on the GPU, and the draft head BF16 vs FP8 vs FP8 + the exact top-k pick vs FP8 + the certified pick
# (no host sync, as where a graph is captured), eager and from CUDA graphs, against the measured
# copy floor, and the fused Triton kernel (bench/fused_head.py). Each check runs even when another
# fails (the exit status says whether any did); results land in bench/results/ and, when $OUT is
# set (the device tool's output folder), are copied there too.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())" || exit 1
status=0
python -m bench.head_quantize --device cuda --runs 20 || status=1
python -m bench.head_matmul --shapes 1024x262144 5376x262144 --reps 100 || status=1
# The fused Triton kernel beside BF16 and today's path (not yet run on a GPU: three shapes x 4 batches x 2 kinds
# of hidden states, each from CUDA graphs), its stage counts and every pick against BF16's.
python -m bench.fused_head --reps 50 || status=1
if [ -n "${OUT:-}" ]; then cp bench/results/*cuda*.json "$OUT"/ 2>/dev/null || true; fi
exit "$status"
