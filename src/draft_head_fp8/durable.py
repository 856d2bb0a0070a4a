"""Write-once files: create exclusively, never overwrite, never leave a partial file.

The bytes go into an anonymous inode (``O_TMPFILE``) that no reader can see, are fsynced, and are
then linked to their final name with ``link()``, which fails with ``EEXIST`` instead of replacing
anything. A crash at any instant leaves either no file or the complete file, and no temporary name
in the folder. Filesystems without ``O_TMPFILE`` (NFS, some FUSE) fall back to a hidden temporary
name in the same folder that is removed in all but a SIGKILL between write and link; ``rename()``
is never used because it overwrites.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

_TMP_PREFIX = ".draft-head-fp8-tmp-"


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: str | os.PathLike, mode: int = 0o777) -> None:
    """``mkdir -p`` that fsyncs each parent whose entry list changed, so a new folder survives a
    crash."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue
        fsync_dir(folder.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def create_exclusive(path: str | os.PathLike, data: bytes, *, mode: int = 0o644) -> None:
    """Create ``path`` holding exactly ``data``; ``FileExistsError`` if anything is already there.

    Durable before return: file contents, then the folder entry, are fsynced.
    """
    path = Path(path)
    folder = path.parent
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            raise
        if exc.errno == errno.ENOENT and not folder.is_dir():
            raise
        _create_exclusive_named_tmp(path, data, mode)
        return
    try:
        _write_all(fd, data)
        os.fsync(fd)
        # linkat() of /proc/self/fd/N with AT_SYMLINK_FOLLOW gives the anonymous inode its one
        # name; EEXIST means someone else won, and nothing of theirs is touched. os.link() only
        # calls linkat() when given a dir fd: without one it calls link(2), which never follows
        # the magic link and fails with EXDEV.
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _link_exclusive(f"/proc/self/fd/{fd}", path, dst_dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        os.close(fd)
    fsync_dir(folder)


def _link_exclusive(
    source: str | os.PathLike, path: Path, *, dst_dir_fd: int | None = None
) -> None:
    try:
        if dst_dir_fd is None:
            os.link(source, path)
        else:
            os.link(source, path.name, dst_dir_fd=dst_dir_fd)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "already exists, not overwritten", str(path)) from None


def _create_exclusive_named_tmp(path: Path, data: bytes, mode: int) -> None:
    tmp = path.parent / f"{_TMP_PREFIX}{path.name}.{os.getpid()}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        _link_exclusive(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    fsync_dir(path.parent)


def create_exclusive_at(dir_fd: int, name: str, data: bytes, *, mode: int = 0o644) -> None:
    """``create_exclusive`` of the single component ``name`` inside the open folder ``dir_fd``.

    Callers that opened ``dir_fd`` with ``O_NOFOLLOW`` get a write that no symlink swapped into the
    path afterwards can redirect. The link goes through ``dst_dir_fd`` on purpose: only then does
    os.link() call linkat() with AT_SYMLINK_FOLLOW, which resolves the /proc magic link.
    """
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a single path component: {name!r}")
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        _create_exclusive_named_tmp_at(dir_fd, name, data, mode)
        return
    try:
        _write_all(fd, data)
        os.fsync(fd)
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd)
    finally:
        os.close(fd)
    os.fsync(dir_fd)


def _create_exclusive_named_tmp_at(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    tmp = f"{_TMP_PREFIX}{name}.{os.getpid()}.{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
    os.fsync(dir_fd)
