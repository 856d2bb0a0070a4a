"""Tools that build what the package ships (the trained tiny pair), and what tests and
benchmarks share (``vllm_standins``); not installed with the package."""
