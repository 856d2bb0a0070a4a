"""One boot: reading it, adding its files, and sealing it into the chain.

Every file is created exclusively (durable.create_exclusive_at: O_TMPFILE, fsync, link(), fsync of
the folder), so a crash leaves a file complete or absent, and nothing is ever rewritten. A boot
without MANIFEST.json is *incomplete*: listed as such, never hidden, never deleted.

Locks: adding a file holds the boot folder's flock shared, sealing holds it exclusive, so a seal
sees every file whole or not at all and exactly one of several racing sealers writes the manifest.
A sealer takes the root lock (for the chain head) only while it already holds the boot's.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from draft_head_fp8 import durable
from draft_head_fp8.nodes import record_of

from . import documents
from .chain import chain_head, link_fields
from .errors import ArchiveError, BootIncompleteError, BootSealedError, UnsafePathError
from .fs import (
    CHUNK,
    check_name,
    exists_at,
    fd_closing,
    flock,
    hash_fd,
    open_dir,
    open_file,
    read_at,
    regular_files,
    walk,
    wrap_os_error,
)
from .identity import utc_now
from .layout import (
    BOOT_JSON,
    DIR_MODE,
    FILE_MODE,
    INCOMPLETE,
    MANIFEST,
    MANIFEST_SCHEMA,
    SEALED,
    encode_json,
)
from .rootdir import open_root, root_lock, scan


class ArchiveRoot(Protocol):
    """What a boot needs of its archive: where the archive is. (``store.Archive`` makes boots;
    naming it here would make a circle.)"""

    root: Path


class Boot:
    """One engine start: a numbered folder in the archive. Cheap to create; reads the disk
    lazily."""

    def __init__(
        self,
        archive: ArchiveRoot,
        seq: int,
        launch_id: str,
        name: str,
        *,
        identity: dict[str, Any] | None = None,
    ):
        self.archive = archive
        self.seq = seq
        self.launch_id = launch_id
        self.name = name
        # What this object wrote: name -> sha256, re-checked at seal.
        self._written: dict[str, str] = {}
        self._identity = identity  # boot.json as its writer knows it; else read on first use

    def __repr__(self) -> str:
        return (
            f"Boot(seq={self.seq}, launch_id={self.launch_id!r}, status={self.status!r}, "
            f"path={str(self.path)!r})"
        )

    @property
    def path(self) -> Path:
        return self.archive.root / self.name

    @property
    def sealed(self) -> bool:
        try:
            os.lstat(self.path / MANIFEST)
            return True
        except FileNotFoundError:
            return False

    @property
    def status(self) -> str:
        return SEALED if self.sealed else INCOMPLETE

    @contextlib.contextmanager
    def _dir(self) -> Iterator[int]:
        with (
            fd_closing(open_root(self.archive.root)) as root_fd,
            fd_closing(open_dir(root_fd, self.name, str(self.path))) as bfd,
        ):
            yield bfd

    # -- reading

    @property
    def identity(self) -> dict[str, Any] | None:
        """boot.json, parsed; None when missing or unreadable (a crash before it was written)."""
        if self._identity is None:
            try:
                with self._dir() as bfd:
                    value = json.loads(read_at(bfd, BOOT_JSON, str(self.path / BOOT_JSON)))
            except (OSError, ArchiveError, ValueError, RecursionError):
                return None
            self._identity = value if isinstance(value, dict) else None
        return self._identity

    @property
    def expected_files(self) -> list[str] | None:
        """The files boot.json says this boot waits for (join_boot), or None for a boot that
        waits for nothing or whose list is unreadable (verify names the latter)."""
        try:
            return documents.expected_files_of(self.identity or {})
        except documents.BadExpectedFiles:
            return None

    @property
    def manifest(self) -> dict[str, Any] | None:
        try:
            with self._dir() as bfd:
                value = json.loads(read_at(bfd, MANIFEST, str(self.path / MANIFEST)))
        except (OSError, ArchiveError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def read_bytes(self, name: str) -> bytes:
        parts = check_name(name) if name != MANIFEST else [MANIFEST]
        with self._dir() as bfd, contextlib.ExitStack() as stack:
            dfd = bfd
            for i, part in enumerate(parts[:-1]):
                shown = str(self.path.joinpath(*parts[: i + 1]))
                dfd = stack.enter_context(fd_closing(open_dir(dfd, part, shown)))
            return read_at(dfd, parts[-1], str(self.path / name))

    def files(self) -> list[tuple[str, int]]:
        """Every regular file in the boot, (relative path, size), sorted; symlinks are skipped."""
        with self._dir() as bfd:
            return regular_files(bfd)

    # -- writing

    def add_bytes(self, name: str, data: bytes | bytearray | memoryview) -> Path:
        """Store ``data`` exactly as ``name`` in this boot; FileExistsError if the name is taken."""
        parts = check_name(name)
        data = bytes(data)
        with self._dir() as bfd, flock(bfd, exclusive=False), contextlib.ExitStack() as stack:
            if exists_at(bfd, MANIFEST):
                raise BootSealedError(
                    f"boot {self.name} is sealed; sealed boots never change (start a new boot)"
                )
            dfd = bfd
            for i, part in enumerate(parts[:-1]):
                shown = str(self.path.joinpath(*parts[: i + 1]))
                try:
                    os.mkdir(part, DIR_MODE, dir_fd=dfd)
                    os.fsync(dfd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise wrap_os_error(exc, f"creating {shown}") from exc
                dfd = stack.enter_context(fd_closing(open_dir(dfd, part, shown)))
            leaf, shown = parts[-1], str(self.path / name)
            try:
                st = os.lstat(leaf, dir_fd=dfd)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(
                    f"{shown} is a symlink; the archive never follows or replaces symlinks"
                )
            try:
                durable.create_exclusive_at(dfd, leaf, data, mode=FILE_MODE)
            except FileExistsError:
                raise FileExistsError(
                    errno.EEXIST,
                    f"{name} already exists in boot {self.name}; "
                    "archive files are never rewritten, pick another name",
                    shown,
                ) from None
            except OSError as exc:
                raise wrap_os_error(exc, f"writing {shown}") from exc
        self._written[name] = hashlib.sha256(data).hexdigest()
        return self.path / name

    def add_file(self, name: str, source: str | os.PathLike) -> Path:
        """Copy the bytes of ``source`` (read whole, then written like add_bytes) as ``name``."""
        with open(source, "rb") as f:
            data = f.read()
        return self.add_bytes(name, data)

    def seal(self) -> dict[str, Any]:
        """Write MANIFEST.json (every file, size, SHA-256, chain link); the boot never changes
        after.

        BootIncompleteError, writing nothing, while files that boot.json expects are missing."""
        with self._dir() as bfd, flock(bfd, exclusive=True):
            if exists_at(bfd, MANIFEST):
                raise BootSealedError(f"boot {self.name} is already sealed")
            missing = self._missing(bfd)
            if missing:
                raise BootIncompleteError(
                    f"cannot seal {self.name}: {len(missing)} expected file(s) missing: "
                    f"{', '.join(missing)}; let every rank add its files (or leave the boot "
                    "incomplete: verify lists it, nothing is lost)",
                    missing,
                )
            return self._write_manifest(bfd)

    def seal_if_complete(self) -> dict[str, Any] | None:
        """Seal when every expected file is present and nobody sealed yet; else None.

        For the ranks of one engine start: each calls this after adding its own files; the boot's
        exclusive lock makes exactly one of them (the last to finish) write the manifest."""
        with self._dir() as bfd, flock(bfd, exclusive=True):
            if exists_at(bfd, MANIFEST) or not exists_at(bfd, BOOT_JSON) or self._missing(bfd):
                return None
            return self._write_manifest(bfd)

    def _missing(self, bfd: int) -> list[str]:
        """Expected files not (yet) in the boot, in boot.json's order. Holding the boot's lock."""
        present = {rel for rel, _ in regular_files(bfd)}
        if BOOT_JSON not in present:
            raise ArchiveError(
                f"cannot seal {self.name}: {BOOT_JSON} is missing (the boot was never fully begun)"
            )
        try:
            identity = json.loads(read_at(bfd, BOOT_JSON, str(self.path / BOOT_JSON)))
            expected = documents.expected_files_of(identity if isinstance(identity, dict) else {})
        except (ValueError, RecursionError) as exc:
            # Refuse rather than guess: a boot whose wait-list cannot be read might lack a rank.
            raise ArchiveError(
                f"cannot seal {self.name}: {BOOT_JSON} cannot be read ({exc}); "
                "leave the boot incomplete and start a new one"
            ) from None
        return [name for name in expected or () if name not in present]

    def _write_manifest(self, bfd: int) -> dict[str, Any]:
        """Hash every file and link the manifest to the chain head. Holding the boot's lock."""
        buf = bytearray(CHUNK)
        files = []
        for rel, dfd, leaf, st in walk(bfd):
            shown = str(self.path / rel)
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise UnsafePathError(
                    f"cannot seal {self.name}: {shown} is {kind}; remove it by "
                    "hand if it is not evidence"
                )
            with fd_closing(open_file(dfd, leaf, shown)) as ffd:
                size, digest = hash_fd(ffd, buf)
            if rel in self._written and self._written[rel] != digest:
                raise ArchiveError(
                    f"cannot seal {self.name}: {shown} changed on disk after it was written"
                )
            files.append({"path": rel, "size": size, "sha256": digest})
        files.sort(key=lambda f: f["path"])
        root = self.archive.root
        with fd_closing(open_root(root)) as root_fd, root_lock(root_fd, root, exclusive=True):
            manifest: dict[str, Any] = {
                "schema": MANIFEST_SCHEMA,
                "boot": self.name,
                "seq": self.seq,
                "launch_id": self.launch_id,
                "sealed_at": utc_now(),
                **link_fields(chain_head(root_fd, root, scan(root_fd))),
                "files": files,
            }
            manifest["manifest_sha256"] = documents.self_digest(manifest)
            try:
                durable.create_exclusive_at(bfd, MANIFEST, encode_json(manifest), mode=FILE_MODE)
            except FileExistsError:
                raise BootSealedError(f"boot {self.name} was sealed concurrently") from None
            except OSError as exc:
                raise wrap_os_error(exc, f"sealing {self.name}") from exc
        return manifest

    def summary(self) -> dict[str, Any]:
        ident = self.identity or {}
        man = self.manifest
        if man is not None and isinstance(man.get("files"), list):
            listed = [f for f in man["files"] if isinstance(f, dict)]
            count = len(listed) + 1
            size = sum(f.get("size", 0) for f in listed if isinstance(f.get("size"), int))
            present = {f.get("path") for f in listed}
        else:
            try:
                found = self.files()
            except (OSError, ArchiveError):
                found = []
            count, size = len(found), sum(s for _, s in found)
            present = {rel for rel, _ in found}
        expected = self.expected_files
        # Which node of its launch this boot is (node 0 of 1 where the launch was one node).
        node = (
            None
            if not ident
            else record_of(ident, boot_launch_id=self.launch_id, expected=expected)
        )
        return {
            "seq": self.seq,
            "launch_id": self.launch_id,
            "boot": self.name,
            "status": self.status,
            "path": str(self.path),
            "started_at": ident.get("started_at"),
            "host": ident.get("host"),
            "sealed_at": man.get("sealed_at") if man else None,
            "chain_index": man.get("chain_index") if man else None,
            "files": count,
            "bytes": size,
            "expected_files": expected,
            "expected_missing": None
            if expected is None
            else [f for f in expected if f not in present],
            "node": node,
        }
