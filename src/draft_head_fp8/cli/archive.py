"""``draft-head-fp8 archive list|show|verify|diff|prune|launch``: the per-boot archive, for people.

Errors are one line on stderr; exit status 0 ok, 1 damage or failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from draft_head_fp8.archive import (
    BOOT_JSON,
    MANIFEST,
    ROOT_ENV,
    Archive,
    ArchiveError,
    ArchiveNotFoundError,
    UnknownBootError,
)
from draft_head_fp8.archive.diff import diff_boots, flatten
from draft_head_fp8.cli._common import one_line_errors
from draft_head_fp8.cli.archive_launch import add_launch_parser, run_launch
from draft_head_fp8.cli.archive_proofs import print_proofs, proofs_of

__all__ = ["add_archive_parser", "run_archive"]


class _BadInput(ArchiveError):
    """A command-line value that makes no sense; exit status 2."""


# -------------------------------------------------------------------------------------------- CLI

_EXAMPLES = {
    "archive": "examples:\n  draft-head-fp8 archive list\n"
    "  draft-head-fp8 archive verify --root /var/lib/draft-head-fp8",
    "list": "example:\n  draft-head-fp8 archive list --root /var/lib/draft-head-fp8 --json",
    "show": "example:\n  draft-head-fp8 archive show -1        # the newest boot\n"
    "  draft-head-fp8 archive show 12 --json  # by sequence number (or launch id)",
    "verify": "example:\n"
    "  draft-head-fp8 archive verify --root /var/lib/draft-head-fp8 && echo intact\n\n"
    "exit status: 0 all intact, 1 something is wrong (every problem is printed), 2 bad input",
    "diff": "example:\n"
    "  draft-head-fp8 archive diff -2 -1      # what changed between the last two boots",
    "prune": "example:\n  draft-head-fp8 archive prune --keep 100 --dry-run\n\n"
    "Deletes whole sealed boots, oldest first in chain order; incomplete boots are never touched.",
}


def add_archive_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``archive`` with its subcommands to an argparse subparsers object; returns its parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        metavar="DIR",
        help=f"archive folder (default: ${ROOT_ENV}, else the user state folder)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser = one_line_errors(
        subparsers.add_parser(
            "archive",
            help="per-boot diagnostic archive: list, show, verify, diff, prune, launch",
            description="The per-boot diagnostic archive: every engine start's receipts and "
            "diagnostics, byte for byte, sealed by a manifest and chained.",
            epilog=_EXAMPLES["archive"],
            formatter_class=fmt,
        )
    )
    parser.set_defaults(func=run_archive)
    sub = parser.add_subparsers(dest="archive_command", metavar="COMMAND", required=True)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return one_line_errors(
            sub.add_parser(
                name,
                parents=[common],
                help=help_,
                description=help_,
                epilog=_EXAMPLES[name],
                formatter_class=fmt,
            )
        )

    add("list", "list every boot (sealed or incomplete) in sequence order")
    p = add("show", "show one boot's identity and files")
    p.add_argument(
        "boot", metavar="BOOT", help="sequence number, launch id, or negative index (-1 = newest)"
    )
    add("verify", "check every byte, the manifest chain, and missing or extra files")
    p = add("diff", "compare two boots' identities and receipts field by field")
    p.add_argument("boot_a", metavar="BOOT_A", help="sequence number, launch id, or negative index")
    p.add_argument("boot_b", metavar="BOOT_B", help="sequence number, launch id, or negative index")
    p.add_argument(
        "--exit-code", action="store_true", help="exit 1 when the boots differ (like git diff)"
    )
    p = add("prune", "delete the oldest sealed boots, keeping the newest N")
    p.add_argument(
        "--keep", type=int, required=True, metavar="N", help="sealed boots to keep (>= 0)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted, delete nothing"
    )
    one_line_errors(add_launch_parser(sub, fmt))
    return parser


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _show_value(v: Any, present: bool = True) -> str:
    return "(absent)" if not present else json.dumps(v)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _cmd_list(arc: Archive, args) -> int:
    rows = [b.summary() for b in arc.boots()]
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print(f"(no boots in {arc.root})", file=sys.stderr)
        return 0
    print(
        f"{'SEQ':>8}  {'LAUNCH ID':<32}  {'STATUS':<10}  {'NODE':<5}  {'STARTED':<27}  "
        f"{'HOST':<16}  {'FILES':>5}  SIZE"
    )
    for r in rows:
        print(
            f"{r['seq']:>8}  {r['launch_id']:<32}  {r['status']:<10}  {_node(r):<5}  "
            f"{r['started_at'] or '-':<27}  {(r['host'] or '-')[:16]:<16}  "
            f"{r['files']:>5}  {_human(r['bytes'])}"
            + (f"  expected {_expected_count(r)}" if r["expected_files"] is not None else "")
        )
    return 0


def _node(summary: dict[str, Any]) -> str:
    """'1/2': node 1 of a launch on 2 nodes ('0/1' on one node; '-' without a boot.json)."""
    node = summary.get("node")
    return "-" if not node else f"{node.get('node_rank')}/{node.get('nnodes')}"


def _node_said(node: dict[str, Any]) -> str:
    return (
        f"{node.get('node_rank')} of {node.get('nnodes')} of launch {node.get('launch_id')}, "
        f"ranks {node.get('ranks')} of TP {node.get('tp_size')}"
    )


def _expected_count(summary: dict[str, Any]) -> str:
    """'3/4': how many of the files a boot waits for (join_boot) are there."""
    total = len(summary["expected_files"])
    return f"{total - len(summary['expected_missing'])}/{total}"


def _cmd_show(arc: Archive, args) -> int:
    boot = arc.find(args.boot)
    summary, identity, manifest = boot.summary(), boot.identity, boot.manifest
    files = boot.files()
    listed = (manifest or {}).get("files")
    digests = {
        f.get("path"): f.get("sha256")
        for f in (listed if isinstance(listed, list) else [])
        if isinstance(f, dict)
    }
    runners = _runners(boot, files)
    proofs = proofs_of(boot)
    files = [(p, s) for p, s in files if not p.startswith("proofs/")]  # listed with their proof
    if args.json:
        _print_json(
            {
                "boot": summary,
                "identity": identity,
                "runners": runners,
                "manifest": manifest,
                "files": [{"path": p, "size": s, "sha256": digests.get(p)} for p, s in files],
                "proofs": proofs,
            }
        )
        return 0
    print(f"boot {boot.name}  (seq {boot.seq}, {summary['status']})")
    print(f"  path:        {boot.path}")
    if summary["node"]:
        print(f"  node:        {_node_said(summary['node'])}")
    if identity is None:
        print(f"  identity:    ({BOOT_JSON} missing or unreadable)")
    else:
        for key, value in flatten(identity, "", {}).items():
            if key not in ("seq", "launch_id", "boot", "schema"):
                print(f"  {key + ':':<36} {json.dumps(value)}")
    _print_runners(runners)
    if summary["expected_files"] is not None:
        missing = summary["expected_missing"]
        print(
            f"  expected:    {_expected_count(summary)} files present"
            + (f" (missing: {', '.join(missing)})" if missing else "")
        )
    if manifest is None:
        print("  manifest:    none (incomplete boot: never sealed, kept as evidence)")
    else:
        prev = manifest.get("previous_boot") or "(start of chain)"
        print(
            f"  sealed at:   {manifest.get('sealed_at')}  "
            f"(chain index {manifest.get('chain_index')}, previous {prev})"
        )
    print("  files:")
    for path, size in files:
        print(f"    {size:>10}  {digests.get(path, '-'):<64}  {path}")
    print_proofs(proofs)
    return 0


def _print_runners(runners: dict[str, Any]) -> None:
    for rank, runner in sorted(runners.items()):
        described = (
            "not recorded (diagnostics before v4)"
            if runner is None
            else (f"{runner['name']}: {runner['model_runner']}, speculator {runner['speculator']}")
        )
        print(f"  {f'runner (rank {rank}):':<36} {described}")


def _runners(boot: Any, files: list) -> dict[str, Any]:
    """Each rank's model runner, as its diagnostics recorded it (None before diagnostics v4)."""
    found: dict[str, Any] = {}
    for path, _ in files:
        rank = path.removeprefix("diagnostics/post_share-rank").removesuffix(".json")
        if rank != path and rank.isdigit():
            try:
                found[rank] = json.loads(boot.read_bytes(path)).get("runner")
            except (OSError, ValueError, AttributeError, ArchiveError):
                found[rank] = None
    return found


def _cmd_verify(arc: Archive, args) -> int:
    report = arc.verify()
    if args.json:
        _print_json(report.to_dict())
        return 0 if report.ok else 1
    for problem in report.problems:
        print(f"PROBLEM {problem}")
    for name in report.incomplete:
        waits = report.expected.get(name)
        detail = (
            ""
            if waits is None
            else (
                f"; expected {len(waits['present'])}/"
                f"{len(waits['present']) + len(waits['missing'])}"
                f" files present, missing: {', '.join(waits['missing']) or 'none'}"
            )
        )
        print(f"incomplete: {name} (no {MANIFEST}; listed, never hidden{detail})")
    for lost in report.incomplete_proofs:
        print(f"INCOMPLETE {lost}")
    for note in report.notes:
        print(f"note: {note}")
    boots = len(report.sealed) + len(report.incomplete)
    tail = (
        f"{boots} boot(s) ({len(report.sealed)} sealed, {len(report.incomplete)} incomplete), "
        f"{report.files_checked} file(s), {_human(report.bytes_checked)} checked"
    )
    if report.ok:
        print(f"verify: ok, {tail}")
        return 0
    print(
        f"verify: FAILED, {len(report.problems)} problem(s), "
        f"{len(report.incomplete_proofs)} incomplete record(s) in {tail}"
    )
    return 1


def _cmd_diff(arc: Archive, args) -> int:
    a, b = arc.find(args.boot_a), arc.find(args.boot_b)
    result = diff_boots(a, b)
    differs = bool(result["identity"]) or any(
        r.get("only_in") or r.get("changes") for r in result["receipts"]
    )
    if args.json:
        _print_json(result)
    else:
        print(f"--- a: {a.name}\n+++ b: {b.name}")

        def show(changes):
            for c in changes:
                print(
                    f"  {c['key']}: {_show_value(c['a'], c['in_a'])} -> "
                    f"{_show_value(c['b'], c['in_b'])}"
                )

        print(f"identity ({BOOT_JSON}):" + ("" if result["identity"] else " same"))
        show(result["identity"])
        if not result["receipts"]:
            print("receipts: none in either boot")
        for r in result["receipts"]:
            if r.get("only_in"):
                print(f"{r['path']}: only in {r['only_in']}")
            else:
                print(f"{r['path']}:" + ("" if r["changes"] else " same"))
                show(r["changes"])
    return 1 if (args.exit_code and differs) else 0


def _cmd_prune(arc: Archive, args) -> int:
    if args.keep < 0:
        raise _BadInput(f"--keep must be 0 or more, got {args.keep}")
    result = arc.prune(args.keep, dry_run=args.dry_run)
    if args.json:
        _print_json(result.to_dict())
        return 0
    verb = "would delete" if result.dry_run else "deleted"
    print(
        f"{verb} {len(result.pruned)} sealed boot(s)"
        f"{': ' + ', '.join(result.pruned) if result.pruned else ''}"
    )
    print(
        f"kept {len(result.kept_sealed)} sealed, {len(result.incomplete)} incomplete (never pruned)"
    )
    if result.record:
        print(f"chain cut recorded in {result.record}")
    return 0


_COMMANDS = {
    "list": _cmd_list,
    "show": _cmd_show,
    "verify": _cmd_verify,
    "diff": _cmd_diff,
    "prune": _cmd_prune,
}


def run_archive(args: argparse.Namespace) -> int:
    """Run a parsed ``archive`` command; returns the exit status. Errors are one line on stderr."""
    command = getattr(args, "archive_command", None)
    prog = "draft-head-fp8 archive"
    if command == "launch":  # several roots, not one: its own module
        return run_launch(args)
    if command not in _COMMANDS:
        print(
            f"{prog}: error: choose a command: {', '.join(_COMMANDS)}, launch "
            f"(see `{prog} --help`)",
            file=sys.stderr,
        )
        return 2
    try:
        arc = Archive(args.root, create=False)
        return _COMMANDS[command](arc, args)
    except (ArchiveNotFoundError, UnknownBootError, _BadInput) as exc:
        hint = f"; run `{prog} list` to see the boots" if isinstance(exc, UnknownBootError) else ""
        print(f"{prog} {command}: error: {exc}{hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... | head`
        return 0
    except (ArchiveError, OSError) as exc:
        print(f"{prog} {command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one line, never a traceback in an operator's terminal
        print(
            f"{prog} {command}: internal error ({type(exc).__name__}: {exc}); please report it",
            file=sys.stderr,
        )
        return 1
