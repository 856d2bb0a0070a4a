"""The archive root: opening it, its lock, and what lies in it (boots, prune records, strays)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from . import documents
from .errors import ArchiveNotFoundError, UnsafePathError
from .fs import exists_at, fd_closing, flock, open_dir, read_at, wrap_os_error
from .layout import BOOT_NAME, FILE_MODE, LOCK_NAME, MANIFEST, PRUNED_NAME


class BootEntry(NamedTuple):
    """A boot folder's name and what the name says."""

    seq: int
    launch_id: str
    name: str


@dataclasses.dataclass
class Listing:
    boots: list[BootEntry]  # in sequence order
    records: list[str]  # PRUNED-*.json names, sorted
    other: list[tuple[str, str]]  # (name, kind) of everything else, sorted


def open_root(root: Path) -> int:
    try:
        return open_dir(None, root, str(root))
    except FileNotFoundError:
        raise ArchiveNotFoundError(f"archive root {root} disappeared") from None


@contextlib.contextmanager
def root_lock(root_fd: int, root: Path, *, exclusive: bool) -> Iterator[None]:
    """The root lock. Shared lockers (verify) tolerate a read-only archive and go unlocked."""
    flags = (os.O_RDWR | os.O_CREAT) if exclusive else os.O_RDONLY
    try:
        fd = os.open(LOCK_NAME, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=root_fd)
    except OSError as exc:
        if exclusive:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(f"{root / LOCK_NAME} is a symlink; remove it") from exc
            raise wrap_os_error(exc, f"opening the lock {root / LOCK_NAME}") from exc
        yield
        return
    with fd_closing(fd), flock(fd, exclusive):
        yield


def scan(root_fd: int) -> Listing:
    boots, records, other = [], [], []
    with os.scandir(root_fd) as it:
        for entry in it:
            name = entry.name
            m = BOOT_NAME.fullmatch(name)
            is_dir = entry.is_dir(follow_symlinks=False)
            if m and is_dir:
                boots.append(BootEntry(int(m.group(1)), m.group(2), name))
            elif PRUNED_NAME.fullmatch(name) and entry.is_file(follow_symlinks=False):
                records.append(name)
            elif name == LOCK_NAME and entry.is_file(follow_symlinks=False):
                continue
            else:
                kind = "symlink" if entry.is_symlink() else ("folder" if is_dir else "file")
                other.append((name, kind))
    boots.sort(key=lambda b: (b.seq, b.name))
    return Listing(boots, sorted(records), sorted(other))


def is_sealed(root_fd: int, boot: BootEntry) -> bool:
    return exists_at(root_fd, f"{boot.name}/{MANIFEST}")


def read_manifest(root_fd: int, root: Path, boot: BootEntry) -> tuple[bytes, dict[str, Any] | None]:
    """The manifest's raw bytes, and the document when they parse as a JSON object."""
    shown = root / boot.name
    with fd_closing(open_dir(root_fd, boot.name, str(shown))) as bfd:
        raw = read_at(bfd, MANIFEST, str(shown / MANIFEST))
    try:
        doc = documents.load_json(raw)
    except (ValueError, RecursionError):
        return raw, None
    return raw, doc if isinstance(doc, dict) else None
