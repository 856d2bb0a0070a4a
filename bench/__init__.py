"""Benchmark scripts: run from the repository root as ``python -m bench.<name>``; each prints a
table and writes JSON to bench/results/."""
