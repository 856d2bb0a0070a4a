"""Test-only: one process that runs the probe (``draft_head_fp8.probe``) for many engine runs in
turn, so that the suite pays vLLM's import (~10 s a process here) once per kind of process instead
of once per run (``engine_pool.py`` starts it and decides which runs may share one).

vLLM builds several engines one after another in one process (its own tests do); each run here is
the probe's ``main`` as a fresh process would call it: its own arguments, working folder, settings
(``DRAFT_HEAD_FP8_*``, the archive root) and its own stdout/stderr files. What stays from one run to
the next is only what a process keeps: imported modules, the plugin's registration (the flag is
the same for every run of one server), vLLM's model-info cache. A run that fails ends the server:
whatever it left half-built is never seen by the next run.

Protocol: one JSON object a line on stdin (``argv``, ``env`` and ``per_run``: the run's own
settings and which names count as a run's own, ``cwd``, ``stdout``, ``stderr``); one JSON line
back on the server's original stdout (``returncode``).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback


def _redirect(stdout: str, stderr: str) -> tuple[int, int]:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    return saved


def _restore(saved: tuple[int, int]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, old in zip((1, 2), saved):
        os.dup2(old, fd)
        os.close(old)


def main() -> int:
    from draft_head_fp8 import probe

    answers = os.fdopen(os.dup(1), "w", buffering=1)
    for line in sys.stdin:
        job = json.loads(line)
        names, prefixes = set(job["per_run"]["names"]), tuple(job["per_run"]["prefixes"])
        for name in [n for n in os.environ if n in names or n.startswith(prefixes)]:
            if name not in job["env"]:
                del os.environ[name]
        os.environ.update(job["env"])
        os.chdir(job["cwd"])
        saved = _redirect(job["stdout"], job["stderr"])
        try:
            returncode = probe.main(job["argv"])
        except SystemExit as exc:
            returncode = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            returncode = 1
        finally:
            _restore(saved)
        gc.collect()
        answers.write(json.dumps({"returncode": returncode}) + "\n")
        if returncode != 0:
            return 0  # a failed engine may leave state behind: the next run gets a new process
    return 0


if __name__ == "__main__":
    sys.exit(main())
