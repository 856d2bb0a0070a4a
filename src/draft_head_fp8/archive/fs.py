"""File-descriptor-safe I/O for the archive: no-follow opens relative to an open folder, whole
reads, hashing, flock, the walk of a boot, boot-relative name checks, and OSError wrapping.

Every path below the root is reached through ``dir_fd`` opens with O_NOFOLLOW, so a symlink
swapped in anywhere is reported as what it is and never followed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator
from typing import Any

from .errors import ArchiveError, InvalidNameError, UnsafePathError
from .layout import MANIFEST

CHUNK = 1 << 20
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a file's name must not hang a reader; no effect on regular files.
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@contextlib.contextmanager
def fd_closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def open_dir(parent_fd: int | None, name: str | os.PathLike, shown: str) -> int:
    """Open a folder without following a symlink in its last component."""
    try:
        if parent_fd is None:
            # The root itself may be a configured symlink.
            return os.open(name, _O_DIR & ~os.O_NOFOLLOW)
        return os.open(name, _O_DIR, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symlink" if exc.errno == errno.ELOOP else "not a folder"
            try:
                if stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode):
                    kind = "a symlink"
            except OSError:
                pass
            raise UnsafePathError(f"{shown} is {kind}; the archive never follows symlinks") from exc
        raise


def open_file(dir_fd: int, name: str, shown: str) -> int:
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(
                f"{shown} is a symlink; the archive never follows symlinks"
            ) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{shown} is not a regular file")
    return fd


def read_fd(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def read_at(dir_fd: int, name: str, shown: str) -> bytes:
    with fd_closing(open_file(dir_fd, name, shown)) as fd:
        return read_fd(fd)


def hash_fd(fd: int, buf: bytearray) -> tuple[int, str]:
    """(size, sha256 hex) of everything readable from ``fd``; big reads into a reused buffer."""
    h = hashlib.sha256()
    view = memoryview(buf)
    size = 0
    with open(fd, "rb", buffering=0, closefd=False) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            h.update(view[:n])
            size += n
    return size, h.hexdigest()


@contextlib.contextmanager
def flock(fd: int, exclusive: bool) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False


def walk(dir_fd: int, prefix: str = "") -> Iterator[tuple[str, int, str, os.stat_result]]:
    """(relative path, parent fd, name, lstat) for everything below ``dir_fd``, depth first.

    Folders are entered through O_NOFOLLOW opens relative to their parent, so a symlink is reported
    as what it is and never entered. The parent fd is valid only until the next item.
    """
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        rel = prefix + entry.name
        try:
            st = os.lstat(entry.name, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        yield rel, dir_fd, entry.name, st
        if stat.S_ISDIR(st.st_mode):
            with fd_closing(open_dir(dir_fd, entry.name, rel)) as sub:
                yield from walk(sub, rel + "/")


def regular_files(dir_fd: int) -> list[tuple[str, int]]:
    """(relative path, size) of every regular file below ``dir_fd``, sorted; symlinks skipped."""
    return sorted((rel, st.st_size) for rel, _, _, st in walk(dir_fd) if stat.S_ISREG(st.st_mode))


def check_name(name: Any) -> list[str]:
    """Split a boot-relative file name, refusing anything that could leave the boot folder."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"file name must be a non-empty string, got {name!r}")
    if "\\" in name:
        raise InvalidNameError(f"file name {name!r} contains a backslash; use '/' between folders")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise InvalidNameError(f"file name {name!r} contains a control character")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidNameError(f"file name {name!r} is not valid Unicode text") from None
    if name.startswith("/"):
        raise InvalidNameError(
            f"file name {name!r} is absolute; give a path relative to the "
            "boot, e.g. 'receipts/x.json'"
        )
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidNameError(
                f"file name {name!r} has an empty, '.' or '..' component; it "
                "must stay inside the boot"
            )
        if part.startswith("."):
            raise InvalidNameError(
                f"file name {name!r} has a hidden component; names starting with '.' are reserved"
            )
    if parts == [MANIFEST]:
        raise InvalidNameError(f"{MANIFEST} is written by seal(); it cannot be added")
    return parts


def wrap_os_error(exc: OSError, what: str) -> ArchiveError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ArchiveError(
            f"no space left on the archive's filesystem while {what}; nothing "
            "partial was left behind and earlier boots are untouched; free space "
            "and start a new boot"
        )
    return ArchiveError(f"{what} failed: {exc.strerror or exc}")
