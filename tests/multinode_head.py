"""Node 0 of a two-node test launch as an offline engine (``vllm.LLM`` with ``--nnodes 2``): the
head of the launch, as ``vllm serve`` on node 0 would be, without the API server's own process
and its ~20 s of imports on a 2-core machine. Prints READY and one generated text when the engine
serves, then waits to be stopped."""

from __future__ import annotations

import json
import sys
import time

from vllm import LLM, SamplingParams

if __name__ == "__main__":
    target, assistant, master_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    llm = LLM(
        model=target,
        speculative_config={"method": "eagle", "model": assistant, "num_speculative_tokens": 2},
        dtype="bfloat16",
        tensor_parallel_size=2,
        nnodes=2,
        node_rank=0,
        master_addr="127.0.0.1",
        master_port=master_port,
        distributed_executor_backend="mp",
        enforce_eager=True,
        max_model_len=256,
        kv_cache_memory_bytes=64 << 20,
    )
    print("READY", flush=True)
    (out,) = llm.generate(["The quick brown fox"], SamplingParams(max_tokens=4, temperature=0))
    print("SERVED", json.dumps(out.outputs[0].text), flush=True)
    while True:
        time.sleep(60)
