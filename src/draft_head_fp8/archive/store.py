"""The folder of boots: beginning or joining a boot (numbering), listing and finding boots; verify
and prune are verify.py's and prune.py's.

Sequence numbers are claimed with an exclusive mkdir under the root lock, and never reused: boots
being pruned (hidden) and pruned ones (records) count too.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

from draft_head_fp8 import durable

from . import documents
from .boot import Boot
from .chain import pruned_boots, read_prune_records
from .errors import ArchiveError, ArchiveNotFoundError, BootSealedError, UnknownBootError
from .fs import check_name, fd_closing, open_dir, read_at, wrap_os_error
from .identity import collect_identity
from .layout import (
    BOOT_JSON,
    BOOT_NAME,
    DIR_MODE,
    EXPECTED_FILES,
    FILE_MODE,
    HIDE_PREFIX,
    PRUNED_NAME,
    ROOT_ENV,
    boot_name,
    check_launch_id,
    default_root,
    encode_json,
)
from .prune import PruneResult, prune
from .rootdir import BootEntry, is_sealed, open_root, root_lock, scan
from .verify import VerifyReport, verify


class Archive:
    """The folder of boots. ``Archive(root)`` creates ``root`` (0700) unless ``create=False``."""

    def __init__(self, root: str | os.PathLike | None = None, *, create: bool = True):
        given = Path(root).expanduser() if root is not None else default_root()
        self.root = Path(os.path.abspath(given))
        if not self.root.exists():
            if not create:
                raise ArchiveNotFoundError(
                    f"no archive at {self.root}; pass --root DIR or set {ROOT_ENV}"
                )
            try:
                durable.makedirs_durable(self.root, DIR_MODE)
            except OSError as exc:
                raise wrap_os_error(exc, f"creating the archive root {self.root}") from exc
        elif not self.root.is_dir():
            raise ArchiveError(f"archive root {self.root} is not a folder")

    def __repr__(self) -> str:
        return f"Archive({str(self.root)!r})"

    def _boot(self, entry: BootEntry) -> Boot:
        return Boot(self, entry.seq, entry.launch_id, entry.name)

    # -- beginning a boot

    def begin_boot(
        self, *, extra: dict[str, Any] | None = None, launch_id: str | None = None
    ) -> Boot:
        """Start a boot: claim the next sequence number (exclusive mkdir under the root lock) and
        write boot.json. ``extra`` adds or overrides identity fields, e.g.
        ``{"device_names": [...]}``."""
        launch_id = check_launch_id(launch_id or uuid.uuid4().hex)
        identity = collect_identity(extra=extra)  # before mkdir: a bad `extra` leaves no empty boot
        with fd_closing(open_root(self.root)) as root_fd:
            with root_lock(root_fd, self.root, exclusive=True):
                seq, name = self._claim(root_fd, launch_id)
        identity = {"seq": seq, "launch_id": launch_id, "boot": name, **identity}
        boot = Boot(self, seq, launch_id, name, identity=identity)
        boot.add_bytes(BOOT_JSON, encode_json(identity))
        return boot

    def join_boot(
        self, launch_id: str, *, expected_files: list[str], extra: dict[str, Any] | None = None
    ) -> Boot:
        """The one boot of engine start ``launch_id``, for each of its ranks: the first caller
        begins it (like begin_boot, with ``expected_files`` recorded in boot.json), the others get
        the same boot. Seal it with ``seal_if_complete`` once a rank has added its files; list in
        ``expected_files`` every file any rank adds, so that nothing is added after the seal.

        BootSealedError when that launch's boot is already sealed; ArchiveError when it expects
        other files (two engine starts sharing one launch id)."""
        check_launch_id(launch_id)
        expected = _check_expected(expected_files)
        identity = collect_identity(extra=extra)
        with fd_closing(open_root(self.root)) as root_fd:
            with root_lock(root_fd, self.root, exclusive=True):
                found = [b for b in scan(root_fd).boots if b.launch_id == launch_id]
                if len(found) > 1:
                    raise ArchiveError(
                        f"{len(found)} boots have launch id {launch_id!r} "
                        f"({', '.join(b.name for b in found)}); join_boot needs "
                        "one per engine start: use a new launch id"
                    )
                if found:
                    return self._joined(root_fd, found[0], expected)
                seq, name = self._claim(root_fd, launch_id)
                identity = {
                    "seq": seq,
                    "launch_id": launch_id,
                    "boot": name,
                    **identity,
                    EXPECTED_FILES: expected,
                }
                # Written before the lock goes: a joiner never sees this boot without boot.json.
                # Without the boot's own flock: only this process knows the folder is a boot yet.
                shown = self.root / name / BOOT_JSON
                data = encode_json(identity)
                try:
                    with fd_closing(open_dir(root_fd, name, str(self.root / name))) as bfd:
                        durable.create_exclusive_at(bfd, BOOT_JSON, data, mode=FILE_MODE)
                except OSError as exc:
                    raise wrap_os_error(exc, f"writing {shown}") from exc
        return Boot(self, seq, launch_id, name, identity=identity)

    def _joined(self, root_fd: int, entry: BootEntry, expected: list[str]) -> Boot:
        if is_sealed(root_fd, entry):
            raise BootSealedError(
                f"boot {entry.name} of launch {entry.launch_id!r} is already "
                "sealed; a new engine start needs a new launch id"
            )
        shown = self.root / entry.name / BOOT_JSON
        try:
            with fd_closing(open_dir(root_fd, entry.name, str(self.root / entry.name))) as bfd:
                identity = documents.load_json(read_at(bfd, BOOT_JSON, str(shown)))
            if not isinstance(identity, dict):
                raise ValueError("not a JSON object")
            theirs = documents.expected_files_of(identity)
        except (OSError, ArchiveError, ValueError, RecursionError) as exc:
            raise ArchiveError(
                f"cannot join boot {entry.name}: its {BOOT_JSON} is unreadable "
                f"({exc}); leave it incomplete and start with a new launch id"
            ) from None
        if theirs != expected:
            raise ArchiveError(
                f"boot {entry.name} of launch {entry.launch_id!r} expects "
                f"{theirs}, not {expected}; each rank must pass the same "
                "expected_files, and each engine start its own launch id"
            )
        return self._boot(entry)

    def _claim(self, root_fd: int, launch_id: str) -> tuple[int, str]:
        """Make the next boot folder. Holding the exclusive root lock."""
        seq = self._next_seq(root_fd)
        while True:
            name = boot_name(seq, launch_id)
            try:
                os.mkdir(name, DIR_MODE, dir_fd=root_fd)
                break
            except FileExistsError:  # only if the lock is ineffective (NFS without locks)
                seq += 1
            except OSError as exc:
                raise wrap_os_error(exc, f"creating boot folder {self.root / name}") from exc
        os.fsync(root_fd)
        return seq, name

    def _next_seq(self, root_fd: int) -> int:
        top, records = 0, []
        with os.scandir(root_fd) as it:
            for entry in it:
                m = BOOT_NAME.fullmatch(entry.name.removeprefix(HIDE_PREFIX))
                if m:
                    top = max(top, int(m.group(1)))
                elif PRUNED_NAME.fullmatch(entry.name):
                    records.append(entry.name)
        for entry in pruned_boots(read_prune_records(root_fd, self.root, sorted(records))).values():
            top = max(top, entry["seq"])
        return top + 1

    # -- finding boots

    def boots(self) -> list[Boot]:
        """Every boot folder, sealed or incomplete, in sequence order."""
        with fd_closing(open_root(self.root)) as root_fd:
            return [self._boot(b) for b in scan(root_fd).boots]

    def find(self, ref: str | int) -> Boot:
        """A boot by sequence number, negative index (-1 = newest), folder name or launch id (or a
        unique launch-id prefix of at least 4 characters)."""
        boots = self.boots()
        text = str(ref).strip()
        if re.fullmatch(r"[+-]?\d+", text):
            n = int(text)
            if n < 0:
                if -n > len(boots):
                    raise UnknownBootError(
                        f"no boot {text}: the archive at {self.root} has {len(boots)} boot(s)"
                    )
                return boots[n]
            for boot in boots:
                if boot.seq == n:
                    return boot
            raise UnknownBootError(f"no boot with sequence number {n} in {self.root}")
        exact = [b for b in boots if text in (b.name, b.launch_id)]
        if len(exact) == 1:
            return exact[0]
        prefix = exact or [b for b in boots if len(text) >= 4 and b.launch_id.startswith(text)]
        if len(prefix) == 1:
            return prefix[0]
        if len(prefix) > 1:
            raise UnknownBootError(
                f"boot {text!r} is ambiguous "
                f"({', '.join(b.name for b in prefix)}); give more of the "
                "launch id"
            )
        raise UnknownBootError(f"no boot {text!r} in {self.root}")

    # -- checking and pruning

    def verify(self) -> VerifyReport:
        """Check every byte of every sealed boot, the chain, missing/extra files and stray
        entries."""
        return verify(self.root)

    def prune(self, keep: int, *, dry_run: bool = False) -> PruneResult:
        """Delete the oldest sealed boots (chain order) so that ``keep`` sealed boots remain; see
        prune.py."""
        return prune(self.root, keep, dry_run=dry_run)


def _check_expected(expected_files: Any) -> list[str]:
    """The expected files as boot.json records them: checked names, sorted, each once."""
    if isinstance(expected_files, (str, bytes)) or not hasattr(expected_files, "__iter__"):
        raise ValueError(f"expected_files must be a list of file names, got {expected_files!r}")
    names = list(expected_files)
    if not names:
        raise ValueError("expected_files must name at least one file (e.g. each rank's receipt)")
    for name in names:
        check_name(name)
        if name == BOOT_JSON:
            raise ValueError(f"{BOOT_JSON} is written by join_boot; list the ranks' own files")
    if len(set(names)) != len(names):
        raise ValueError(f"expected_files names a file twice: {names}")
    return sorted(names)
