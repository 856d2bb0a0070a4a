"""Per-boot diagnostic archive (SPEC section 7).

Layout of the root::

    .lock                            flock target; serialises sequence numbers, seals and prunes
    00000001-<launch id>/            one engine start ("boot"), folder 0700, files 0600
        boot.json                    identity, written by begin_boot()
        receipts/..., diagnostics/...  the boot's bytes, exactly as given
        MANIFEST.json                written last by seal(): files, sizes, SHA-256, chain link
    PRUNED-<time>-<rand>.json        write-once record of boots removed by prune()

Every file is created exclusively (durable.create_exclusive_at: O_TMPFILE, fsync, link(), fsync of
the folder), so a crash leaves a file complete or absent, and nothing is ever rewritten. A boot
without MANIFEST.json is *incomplete*: listed as such, never hidden, never deleted.

Chain: each manifest records the SHA-256 of the previous sealed boot's MANIFEST.json bytes. Chain
order is seal order, not sequence order (a boot may seal long after a later one began); the root
lock around "find the head + link my manifest" makes it a single line even with concurrent seals.
Only the newest manifest is unprotected by a successor; its own ``manifest_sha256`` (RFC 8785 over
its other fields) plus a byte-exact canonical-form check catches accidental damage to it.

What boot.json records is identity.py's business; the manifest and prune-record formats are JSON
Schemas in schemas/; the ``archive`` command and the boot diff are archive_cli.py.

Importing this module must stay cheap and must not import torch or vLLM: it runs in every engine
start. jsonschema and rfc8785 are imported only where verification needs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any, Iterator

from . import durable
from .identity import collect_identity, utc_now

__all__ = [
    "Archive",
    "ArchiveError",
    "ArchiveNotFoundError",
    "Boot",
    "BootSealedError",
    "InvalidNameError",
    "Problem",
    "PruneResult",
    "UnknownBootError",
    "UnsafePathError",
    "VerifyReport",
    "collect_identity",
    "default_root",
]

APPNAME = "draft-head-fp8"
ROOT_ENV = "DRAFT_HEAD_FP8_ARCHIVE"
BOOT_JSON = "boot.json"
MANIFEST = "MANIFEST.json"
LOCK_NAME = ".lock"
PRUNED_PREFIX = "PRUNED-"
MANIFEST_SCHEMA = "draft-head-fp8-archive-manifest/v1"
PRUNED_SCHEMA = "draft-head-fp8-archive-pruned/v1"
SEALED, INCOMPLETE = "sealed", "incomplete"

_SEQ_WIDTH = 8
_BOOT_NAME = re.compile(r"^(\d{8,})-([A-Za-z0-9_-]{1,64})$")
_LAUNCH_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PRUNED_NAME = re.compile(r"^PRUNED-[0-9A-Za-z_-]+\.json$")
# A boot being pruned is first renamed to this hidden name, so an interrupted prune never leaves a
# half-deleted folder that looks like a damaged boot.
_HIDE_PREFIX = ".pruned-"
_DIR_MODE, _FILE_MODE = 0o700, 0o600
_CHUNK = 1 << 20
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a file's name must not hang a reader; no effect on regular files.
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


# ----------------------------------------------------------------------------------------- errors


class ArchiveError(Exception):
    """Something about the archive is wrong or cannot be done; the message says what to do."""


class ArchiveNotFoundError(ArchiveError, FileNotFoundError):
    """The archive root does not exist (and was not to be created)."""


class UnknownBootError(ArchiveError, LookupError):
    """No boot matches the given sequence number, index or launch id."""


class BootSealedError(ArchiveError):
    """The boot already has a manifest; sealed boots never change."""


class UnsafePathError(ArchiveError):
    """A symlink or special file where the archive expects a plain folder or file."""


class InvalidNameError(ArchiveError, ValueError):
    """A file name that would escape the boot folder or collide with the archive's own names."""


# ---------------------------------------------------------------------------------- small helpers


def default_root() -> Path:
    """``$DRAFT_HEAD_FP8_ARCHIVE``, else the per-user state folder (platformdirs)."""
    env = os.environ.get(ROOT_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir(APPNAME, appauthor=False))


def _encode_json(obj: Any) -> bytes:
    # The one storage format; verify re-encodes a manifest and compares bytes, so this must be stable.
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("ascii")


@contextlib.contextmanager
def _fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def _open_dir(parent_fd: int | None, name: str | os.PathLike, shown: str) -> int:
    """Open a folder without following a symlink in its last component."""
    try:
        if parent_fd is None:
            return os.open(name, _O_DIR & ~os.O_NOFOLLOW)  # the root itself may be a configured symlink
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


def _open_file(dir_fd: int, name: str, shown: str) -> int:
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{shown} is a symlink; the archive never follows symlinks") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{shown} is not a regular file")
    return fd


def _read_fd(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _read_at(dir_fd: int, name: str, shown: str) -> bytes:
    with _fd(_open_file(dir_fd, name, shown)) as fd:
        return _read_fd(fd)


def _hash_fd(fd: int, buf: bytearray) -> tuple[int, str]:
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
def _flock(fd: int, exclusive: bool) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _check_name(name: Any) -> list[str]:
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
        raise InvalidNameError(f"file name {name!r} is absolute; give a path relative to the boot, e.g. 'receipts/x.json'")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidNameError(f"file name {name!r} has an empty, '.' or '..' component; it must stay inside the boot")
        if part.startswith("."):
            raise InvalidNameError(f"file name {name!r} has a hidden component; names starting with '.' are reserved")
    if parts == [MANIFEST]:
        raise InvalidNameError(f"{MANIFEST} is written by seal(); it cannot be added")
    return parts


def _wrap_os_error(exc: OSError, what: str) -> ArchiveError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ArchiveError(f"no space left on the archive's filesystem while {what}; nothing partial was "
                            f"left behind and earlier boots are untouched; free space and start a new boot")
    return ArchiveError(f"{what} failed: {exc.strerror or exc}")


# ----------------------------------------------------------------------------------- JSON schemas

# The documents themselves are schemas/archive-*-v1.schema.json; these name them for schemas.errors().
_MANIFEST_SCHEMA_FILE = "archive-manifest-v1"
_PRUNED_SCHEMA_FILE = "archive-pruned-v1"
# The manifest schema's "required" list, for the hand-compiled check below.
_MANIFEST_KEYS = frozenset({"schema", "boot", "seq", "launch_id", "sealed_at", "chain_index", "previous",
                            "previous_boot", "files", "manifest_sha256"})
_FILE_KEYS = frozenset({"path", "size", "sha256"})


def _hex64(value: Any) -> bool:
    return type(value) is str and _HEX64.fullmatch(value) is not None


def _pruned_shape_ok(doc: Any) -> bool:
    if type(doc) is not dict or doc.get("schema") != PRUNED_SCHEMA or type(doc.get("boots")) is not list:
        return False
    return all(type(e) is dict and type(e.get("boot")) is str and type(e.get("seq")) is int
               and type(e.get("chain_index")) is int and _hex64(e.get("manifest_sha256")) for e in doc["boots"])


def _manifest_shape_ok(doc: Any) -> bool:
    """The manifest JSON Schema, hand-compiled and at least as strict, for verify's hot path:
    jsonschema costs more per manifest than hashing a small boot, so it only explains failures."""
    if type(doc) is not dict or doc.keys() != _MANIFEST_KEYS or doc["schema"] != MANIFEST_SCHEMA:
        return False
    if not all(type(doc[k]) is str for k in ("boot", "launch_id", "sealed_at")):
        return False
    if type(doc["seq"]) is not int or doc["seq"] < 1 or type(doc["chain_index"]) is not int or doc["chain_index"] < 0:
        return False
    if not ((doc["previous"] is None or _hex64(doc["previous"])) and _hex64(doc["manifest_sha256"])):
        return False
    if doc["previous_boot"] is not None and type(doc["previous_boot"]) is not str:
        return False
    if type(doc["files"]) is not list:
        return False
    for f in doc["files"]:
        if (type(f) is not dict or f.keys() != _FILE_KEYS or type(f["path"]) is not str or not f["path"]
                or type(f["size"]) is not int or f["size"] < 0 or not _hex64(f["sha256"])):
            return False
    return True


def _schema_errors(kind: str, obj: Any) -> list[str]:
    from . import schemas  # loads jsonschema on first use; engine start never gets here

    return schemas.errors(_MANIFEST_SCHEMA_FILE if kind == "manifest" else _PRUNED_SCHEMA_FILE, obj)


def _self_digest(manifest: dict[str, Any]) -> str:
    import rfc8785

    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def _schema_major(value: Any, family: str) -> int | None:
    m = re.fullmatch(re.escape(family) + r"/v(\d+)", value) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------------------------------- Boot


class Boot:
    """One engine start: a numbered folder in the archive. Cheap to create; reads the disk lazily."""

    def __init__(self, archive: Archive, seq: int, launch_id: str, name: str):
        self.archive = archive
        self.seq = seq
        self.launch_id = launch_id
        self.name = name
        self._written: dict[str, str] = {}  # what this object wrote: name -> sha256, re-checked at seal
        self._identity: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Boot(seq={self.seq}, launch_id={self.launch_id!r}, status={self.status!r}, path={str(self.path)!r})"

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
        with _fd(self.archive._open_root()) as root_fd, _fd(_open_dir(root_fd, self.name, str(self.path))) as bfd:
            yield bfd

    # -- reading

    @property
    def identity(self) -> dict[str, Any] | None:
        """boot.json, parsed; None when missing or unreadable (a crash before it was written)."""
        if self._identity is None:
            try:
                with self._dir() as bfd:
                    value = json.loads(_read_at(bfd, BOOT_JSON, str(self.path / BOOT_JSON)))
            except (OSError, ArchiveError, ValueError, RecursionError):
                return None
            self._identity = value if isinstance(value, dict) else None
        return self._identity

    @property
    def manifest(self) -> dict[str, Any] | None:
        try:
            with self._dir() as bfd:
                value = json.loads(_read_at(bfd, MANIFEST, str(self.path / MANIFEST)))
        except (OSError, ArchiveError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def read_bytes(self, name: str) -> bytes:
        parts = _check_name(name) if name != MANIFEST else [MANIFEST]
        with self._dir() as bfd, contextlib.ExitStack() as stack:
            dfd = bfd
            for i, part in enumerate(parts[:-1]):
                dfd = stack.enter_context(_fd(_open_dir(dfd, part, str(self.path.joinpath(*parts[: i + 1])))))
            return _read_at(dfd, parts[-1], str(self.path / name))

    def files(self) -> list[tuple[str, int]]:
        """Every regular file in the boot, (relative path, size), sorted; symlinks are skipped."""
        with self._dir() as bfd:
            return sorted((rel, st.st_size) for rel, _, _, st in _walk(bfd) if stat.S_ISREG(st.st_mode))

    # -- writing

    def add_bytes(self, name: str, data: bytes | bytearray | memoryview) -> Path:
        """Store ``data`` exactly as ``name`` in this boot; FileExistsError if the name is taken."""
        parts = _check_name(name)
        data = bytes(data)
        with self._dir() as bfd, _flock(bfd, exclusive=False), contextlib.ExitStack() as stack:
            if _exists_at(bfd, MANIFEST):
                raise BootSealedError(f"boot {self.name} is sealed; sealed boots never change (start a new boot)")
            dfd = bfd
            for i, part in enumerate(parts[:-1]):
                shown = str(self.path.joinpath(*parts[: i + 1]))
                try:
                    os.mkdir(part, _DIR_MODE, dir_fd=dfd)
                    os.fsync(dfd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _wrap_os_error(exc, f"creating {shown}") from exc
                dfd = stack.enter_context(_fd(_open_dir(dfd, part, shown)))
            leaf, shown = parts[-1], str(self.path / name)
            try:
                st = os.lstat(leaf, dir_fd=dfd)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(f"{shown} is a symlink; the archive never follows or replaces symlinks")
            try:
                durable.create_exclusive_at(dfd, leaf, data, mode=_FILE_MODE)
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, f"{name} already exists in boot {self.name}; archive files are "
                                      "never rewritten, pick another name", shown) from None
            except OSError as exc:
                raise _wrap_os_error(exc, f"writing {shown}") from exc
        self._written[name] = hashlib.sha256(data).hexdigest()
        return self.path / name

    def add_file(self, name: str, source: str | os.PathLike) -> Path:
        """Copy the bytes of ``source`` (read whole, then written like add_bytes) as ``name``."""
        with open(source, "rb") as f:
            data = f.read()
        return self.add_bytes(name, data)

    def seal(self) -> dict[str, Any]:
        """Write MANIFEST.json (every file, size, SHA-256, chain link); the boot never changes after."""
        buf = bytearray(_CHUNK)
        with self._dir() as bfd, _flock(bfd, exclusive=True):
            if _exists_at(bfd, MANIFEST):
                raise BootSealedError(f"boot {self.name} is already sealed")
            files = []
            for rel, dfd, leaf, st in _walk(bfd):
                shown = str(self.path / rel)
                if stat.S_ISDIR(st.st_mode):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                    raise UnsafePathError(f"cannot seal {self.name}: {shown} is {kind}; remove it by hand if it is not evidence")
                with _fd(_open_file(dfd, leaf, shown)) as ffd:
                    size, digest = _hash_fd(ffd, buf)
                if rel in self._written and self._written[rel] != digest:
                    raise ArchiveError(f"cannot seal {self.name}: {shown} changed on disk after it was written")
                files.append({"path": rel, "size": size, "sha256": digest})
            files.sort(key=lambda f: f["path"])
            if not any(f["path"] == BOOT_JSON for f in files):
                raise ArchiveError(f"cannot seal {self.name}: {BOOT_JSON} is missing (the boot was never fully begun)")
            with _fd(self.archive._open_root()) as root_fd, self.archive._lock(root_fd, exclusive=True):
                head = self.archive._chain_head(root_fd)
                manifest: dict[str, Any] = {
                    "schema": MANIFEST_SCHEMA,
                    "boot": self.name,
                    "seq": self.seq,
                    "launch_id": self.launch_id,
                    "sealed_at": utc_now(),
                    "chain_index": 0 if head is None else head[2] + 1,
                    "previous": None if head is None else head[0],
                    "previous_boot": None if head is None else head[1],
                    "files": files,
                }
                manifest["manifest_sha256"] = _self_digest(manifest)
                try:
                    durable.create_exclusive_at(bfd, MANIFEST, _encode_json(manifest), mode=_FILE_MODE)
                except FileExistsError:
                    raise BootSealedError(f"boot {self.name} was sealed concurrently") from None
                except OSError as exc:
                    raise _wrap_os_error(exc, f"sealing {self.name}") from exc
        return manifest

    def summary(self) -> dict[str, Any]:
        ident = self.identity or {}
        man = self.manifest
        if man is not None and isinstance(man.get("files"), list):
            files = [f for f in man["files"] if isinstance(f, dict)]
            count = len(files) + 1
            size = sum(f.get("size", 0) for f in files if isinstance(f.get("size"), int))
        else:
            try:
                listed = self.files()
            except (OSError, ArchiveError):
                listed = []
            count, size = len(listed), sum(s for _, s in listed)
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
        }


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False


def _walk(dir_fd: int, prefix: str = "") -> Iterator[tuple[str, int, str, os.stat_result]]:
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
            with _fd(_open_dir(dir_fd, entry.name, rel)) as sub:
                yield from _walk(sub, rel + "/")


# ----------------------------------------------------------------------------------------- report


@dataclasses.dataclass
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass
class VerifyReport:
    root: str
    problems: list[Problem] = dataclasses.field(default_factory=list)
    sealed: list[str] = dataclasses.field(default_factory=list)
    incomplete: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    files_checked: int = 0
    bytes_checked: int = 0
    chain: list[str] = dataclasses.field(default_factory=list)  # sealed boots in chain (seal) order

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: str | Path, message: str) -> None:
        self.problems.append(Problem(str(path), message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "root": self.root,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "sealed": self.sealed,
            "incomplete": self.incomplete,
            "chain": self.chain,
            "notes": self.notes,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
        }


@dataclasses.dataclass
class PruneResult:
    pruned: list[str]
    kept_sealed: list[str]
    incomplete: list[str]
    record: str | None
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Sealed:
    boot: Boot
    raw: bytes | None
    digest: str | None
    manifest: dict[str, Any] | None  # None when unreadable or invalid


# ---------------------------------------------------------------------------------------- Archive


class Archive:
    """The folder of boots. ``Archive(root)`` creates ``root`` (0700) unless ``create=False``."""

    def __init__(self, root: str | os.PathLike | None = None, *, create: bool = True):
        self.root = Path(os.path.abspath(Path(root).expanduser() if root is not None else default_root()))
        if not self.root.exists():
            if not create:
                raise ArchiveNotFoundError(f"no archive at {self.root}; pass --root DIR or set {ROOT_ENV}")
            try:
                durable.makedirs_durable(self.root, _DIR_MODE)
            except OSError as exc:
                raise _wrap_os_error(exc, f"creating the archive root {self.root}") from exc
        elif not self.root.is_dir():
            raise ArchiveError(f"archive root {self.root} is not a folder")

    def __repr__(self) -> str:
        return f"Archive({str(self.root)!r})"

    def _open_root(self) -> int:
        try:
            return _open_dir(None, self.root, str(self.root))
        except FileNotFoundError:
            raise ArchiveNotFoundError(f"archive root {self.root} disappeared") from None

    @contextlib.contextmanager
    def _lock(self, root_fd: int, *, exclusive: bool) -> Iterator[None]:
        """The root lock. Shared lockers (verify) tolerate a read-only archive and go unlocked."""
        flags = (os.O_RDWR | os.O_CREAT) if exclusive else os.O_RDONLY
        try:
            fd = os.open(LOCK_NAME, flags | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE, dir_fd=root_fd)
        except OSError as exc:
            if exclusive:
                if exc.errno == errno.ELOOP:
                    raise UnsafePathError(f"{self.root / LOCK_NAME} is a symlink; remove it") from exc
                raise _wrap_os_error(exc, f"opening the lock {self.root / LOCK_NAME}") from exc
            yield
            return
        with _fd(fd), _flock(fd, exclusive):
            yield

    # -- root scan

    def _scan(self, root_fd: int) -> tuple[list[Boot], list[str], list[tuple[str, str]]]:
        """(boot folders, PRUNED record names, [(name, kind)] of everything else) in the root."""
        boots, records, other = [], [], []
        with os.scandir(root_fd) as it:
            for entry in it:
                name = entry.name
                m = _BOOT_NAME.fullmatch(name)
                is_dir = entry.is_dir(follow_symlinks=False)
                if m and is_dir:
                    boots.append(Boot(self, int(m.group(1)), m.group(2), name))
                elif _PRUNED_NAME.fullmatch(name) and entry.is_file(follow_symlinks=False):
                    records.append(name)
                elif name == LOCK_NAME and entry.is_file(follow_symlinks=False):
                    continue
                else:
                    kind = "symlink" if entry.is_symlink() else ("folder" if is_dir else "file")
                    other.append((name, kind))
        boots.sort(key=lambda b: (b.seq, b.name))
        records.sort()
        return boots, records, sorted(other)

    def _pruned(self, root_fd: int, records: list[str], report: VerifyReport | None = None) -> dict[str, dict[str, Any]]:
        """manifest digest -> pruned-boot entry, from every readable PRUNED record."""
        out: dict[str, dict[str, Any]] = {}
        for name in records:
            shown = self.root / name
            try:
                doc = json.loads(_read_at(root_fd, name, str(shown)))
            except (OSError, ArchiveError, ValueError, RecursionError) as exc:
                if report is not None:
                    report.add(shown, f"unreadable prune record: {exc}")
                continue
            if report is not None:
                errors = _schema_errors("pruned", doc)
                if errors:
                    report.add(shown, "invalid prune record: " + "; ".join(errors))
                    continue
            elif not _pruned_shape_ok(doc):
                # Sealing and numbering run at engine start: skip jsonschema's import there; verify
                # reports the bad record.
                continue
            for entry in doc["boots"]:
                out[entry["manifest_sha256"]] = entry
        return out

    def _read_manifest(self, root_fd: int, boot: Boot) -> tuple[bytes, dict[str, Any] | None]:
        with _fd(_open_dir(root_fd, boot.name, str(boot.path))) as bfd:
            raw = _read_at(bfd, MANIFEST, str(boot.path / MANIFEST))
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            return raw, None
        return raw, doc if isinstance(doc, dict) else None

    def _chain_head(self, root_fd: int) -> tuple[str, str, int] | None:
        """(manifest digest, boot name, chain index) of the last sealed boot, pruned ones included.

        Called under the exclusive root lock. A consistent archive numbers its seals 0..n-1, so the
        newest-first scan stops as soon as it meets index n-1, usually at the first manifest read.
        """
        boots, records, _ = self._scan(root_fd)
        sealed = [b for b in reversed(boots) if _exists_at(root_fd, f"{b.name}/{MANIFEST}")]
        present = {b.name for b in sealed}
        pruned = self._pruned(root_fd, records)
        gone = [e for e in pruned.values() if e["boot"] not in present]
        expected = len(sealed) + len(gone) - 1
        best: tuple[str, str, int] | None = None
        for entry in gone:
            if best is None or entry["chain_index"] > best[2]:
                best = (entry["manifest_sha256"], entry["boot"], entry["chain_index"])
        for boot in sealed:
            if best is not None and best[2] >= expected:
                break
            try:
                raw, doc = self._read_manifest(root_fd, boot)
            except (OSError, ArchiveError):
                continue
            idx = doc.get("chain_index") if doc else None
            if isinstance(idx, int) and not isinstance(idx, bool) and (best is None or idx > best[2]):
                best = (hashlib.sha256(raw).hexdigest(), boot.name, idx)
        return best

    def _next_seq(self, root_fd: int) -> int:
        # Numbers are never reused: boots being pruned (hidden) and pruned ones (records) count too.
        top, records = 0, []
        with os.scandir(root_fd) as it:
            for entry in it:
                m = _BOOT_NAME.fullmatch(entry.name.removeprefix(_HIDE_PREFIX))
                if m:
                    top = max(top, int(m.group(1)))
                elif _PRUNED_NAME.fullmatch(entry.name):
                    records.append(entry.name)
        for entry in self._pruned(root_fd, records).values():
            top = max(top, entry["seq"])
        return top + 1

    # -- public API

    def begin_boot(self, *, extra: dict[str, Any] | None = None, launch_id: str | None = None) -> Boot:
        """Start a boot: claim the next sequence number (exclusive mkdir under the root lock) and
        write boot.json. ``extra`` adds or overrides identity fields, e.g. ``{"device_names": [...]}``."""
        launch_id = launch_id or uuid.uuid4().hex
        if not _LAUNCH_ID.fullmatch(launch_id) or launch_id.isdigit():
            raise ValueError(f"launch id {launch_id!r} must be 1-64 of [A-Za-z0-9_-] and not all digits")
        identity = collect_identity(extra=extra)  # before mkdir: a bad `extra` leaves no empty boot
        with _fd(self._open_root()) as root_fd:
            with self._lock(root_fd, exclusive=True):
                seq = self._next_seq(root_fd)
                while True:
                    name = f"{seq:0{_SEQ_WIDTH}d}-{launch_id}"
                    try:
                        os.mkdir(name, _DIR_MODE, dir_fd=root_fd)
                        break
                    except FileExistsError:  # only if the lock is ineffective (NFS without locks)
                        seq += 1
                    except OSError as exc:
                        raise _wrap_os_error(exc, f"creating boot folder {self.root / name}") from exc
                os.fsync(root_fd)
        boot = Boot(self, seq, launch_id, name)
        identity = {"seq": seq, "launch_id": launch_id, "boot": name, **identity}
        boot.add_bytes(BOOT_JSON, _encode_json(identity))
        boot._identity = identity
        return boot

    def boots(self) -> list[Boot]:
        """Every boot folder, sealed or incomplete, in sequence order."""
        with _fd(self._open_root()) as root_fd:
            return self._scan(root_fd)[0]

    def find(self, ref: str | int) -> Boot:
        """A boot by sequence number, negative index (-1 = newest), folder name or launch id (or a
        unique launch-id prefix of at least 4 characters)."""
        boots = self.boots()
        text = str(ref).strip()
        if re.fullmatch(r"[+-]?\d+", text):
            n = int(text)
            if n < 0:
                if -n > len(boots):
                    raise UnknownBootError(f"no boot {text}: the archive at {self.root} has {len(boots)} boot(s)")
                return boots[n]
            for boot in boots:
                if boot.seq == n:
                    return boot
            raise UnknownBootError(f"no boot with sequence number {n} in {self.root}")
        exact = [b for b in boots if text in (b.name, b.launch_id)]
        if len(exact) == 1:
            return exact[0]
        prefix = [b for b in boots if len(text) >= 4 and b.launch_id.startswith(text)] if not exact else exact
        if len(prefix) == 1:
            return prefix[0]
        if len(prefix) > 1:
            raise UnknownBootError(f"boot {text!r} is ambiguous ({', '.join(b.name for b in prefix)}); give more of the launch id")
        raise UnknownBootError(f"no boot {text!r} in {self.root}")

    def verify(self) -> VerifyReport:
        """Check every byte of every sealed boot, the chain, missing/extra files and stray entries."""
        report = VerifyReport(root=str(self.root))
        buf = bytearray(_CHUNK)
        with _fd(self._open_root()) as root_fd:
            # Snapshot under the shared lock, so a seal racing with us is either wholly in or out.
            with self._lock(root_fd, exclusive=False):
                boots, records, other = self._scan(root_fd)
                pruned = self._pruned(root_fd, records, report)
                snapshot: list[_Sealed] = []
                for boot in boots:
                    if not _exists_at(root_fd, f"{boot.name}/{MANIFEST}"):
                        report.incomplete.append(boot.name)
                        continue
                    try:
                        raw, _ = self._read_manifest(root_fd, boot)
                        snapshot.append(_Sealed(boot, raw, hashlib.sha256(raw).hexdigest(), None))
                    except (OSError, ArchiveError) as exc:
                        report.add(boot.path / MANIFEST, f"unreadable manifest: {exc}")
                        snapshot.append(_Sealed(boot, None, None, None))
            for name, kind in other:
                if name.startswith(_HIDE_PREFIX):
                    report.notes.append(f"{name}: left by an interrupted prune; the next prune removes it")
                else:
                    report.add(self.root / name, f"unexpected {kind} in the archive root (not a boot folder)")
            seqs: dict[int, list[str]] = {}
            for boot in boots:
                seqs.setdefault(boot.seq, []).append(boot.name)
            for seq, names in seqs.items():
                if len(names) > 1:
                    report.add(self.root / names[0], f"sequence number {seq} is used by {len(names)} boots: {', '.join(names)}")
            for item in snapshot:
                report.sealed.append(item.boot.name)
                try:
                    self._verify_sealed(root_fd, item, report, buf)
                except (OSError, ArchiveError) as exc:
                    report.add(item.boot.path, f"cannot be read: {exc}")
            for name in report.incomplete:
                boot = next(b for b in boots if b.name == name)
                try:
                    with _fd(_open_dir(root_fd, boot.name, str(boot.path))) as bfd:
                        for rel, _, _, st in _walk(bfd):
                            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                                report.add(boot.path / rel, "symlink or special file in a boot (never followed)")
                except (OSError, ArchiveError) as exc:
                    report.add(boot.path, f"cannot be read: {exc}")
        self._verify_chain(snapshot, pruned, report)
        return report

    def _verify_sealed(self, root_fd: int, item: _Sealed, report: VerifyReport, buf: bytearray) -> None:
        boot = item.boot
        if item.raw is None:
            return
        manifest = self._check_manifest(item.raw, boot, report)
        item.manifest = manifest
        listed = {}
        if manifest is not None:
            listed = {f["path"]: f for f in manifest["files"]}
        base = f"{self.root}/{boot.name}/"
        with _fd(_open_dir(root_fd, boot.name, base)) as bfd:
            seen = set()
            for rel, dfd, leaf, st in _walk(bfd):
                shown = base + rel
                if stat.S_ISDIR(st.st_mode):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    report.add(shown, "symlink or special file in a sealed boot (never followed)")
                    continue
                if rel == MANIFEST:
                    continue
                seen.add(rel)
                entry = listed.get(rel)
                if entry is None:
                    if manifest is not None:
                        report.add(shown, f"file is not in {MANIFEST} (added after the seal?)")
                    continue
                if st.st_size != entry["size"]:
                    report.add(shown, f"size {st.st_size} bytes, {MANIFEST} says {entry['size']} (truncated or appended)")
                    continue
                with _fd(_open_file(dfd, leaf, shown)) as ffd:
                    size, digest = _hash_fd(ffd, buf)
                report.files_checked += 1
                report.bytes_checked += size
                if size != entry["size"] or digest != entry["sha256"]:
                    report.add(shown, f"content differs from {MANIFEST}: SHA-256 {digest}, expected {entry['sha256']}")
        for rel in sorted(set(listed) - seen):
            report.add(base + rel, f"listed in {MANIFEST} but missing")

    def _check_manifest(self, raw: bytes, boot: Boot, report: VerifyReport) -> dict[str, Any] | None:
        """Parsed manifest when it is exactly what seal() would have written, else None + problems."""
        mpath = boot.path / MANIFEST
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            report.add(mpath, f"not valid JSON ({exc.__class__.__name__}: {exc}); damaged or truncated")
            return None
        major = _schema_major(doc.get("schema") if isinstance(doc, dict) else None, MANIFEST_SCHEMA.rsplit("/", 1)[0])
        if major is not None and major != 1:
            report.add(mpath, f"unknown manifest schema {doc['schema']!r}; this version reads v1 only")
            return None
        if not _manifest_shape_ok(doc):
            errors = _schema_errors("manifest", doc) or ["a value has the wrong type or form"]
            report.add(mpath, "invalid manifest: " + "; ".join(errors[:5]))
            return None
        problems = []
        if raw != _encode_json(doc):
            problems.append("bytes differ from the canonical form seal() writes (edited by hand or damaged)")
        if _self_digest(doc) != doc["manifest_sha256"]:
            problems.append("manifest_sha256 does not match the manifest's content (damaged or edited)")
        if (doc["boot"], doc["seq"], doc["launch_id"]) != (boot.name, boot.seq, boot.launch_id):
            problems.append(f"belongs to boot {doc['boot']!r}, not to the folder it is in")
        if (doc["previous"] is None) != (doc["previous_boot"] is None):
            problems.append("previous and previous_boot must both be set or both be null")
        paths = [f["path"] for f in doc["files"]]
        if len(set(paths)) != len(paths):
            problems.append("lists a file twice")
        for p in paths:
            try:
                _check_name(p)
            except InvalidNameError as exc:
                problems.append(f"lists an unsafe name: {exc}")
        if BOOT_JSON not in paths:
            problems.append(f"does not list {BOOT_JSON}")
        for p in problems:
            report.add(mpath, p)
        return None if problems else doc

    def _verify_chain(self, snapshot: list[_Sealed], pruned: dict[str, dict[str, Any]], report: VerifyReport) -> None:
        by_digest = {s.digest: s for s in snapshot if s.digest}
        by_name = {s.boot.name: s for s in snapshot}
        successors: dict[str, list[_Sealed]] = {}
        starts: list[_Sealed] = []
        for s in snapshot:
            m = s.manifest
            if m is None:
                continue
            mpath = s.boot.path / MANIFEST
            prev, idx = m["previous"], m["chain_index"]
            if prev is None:
                if idx != 0:
                    report.add(mpath, f"chain_index is {idx} but there is no previous manifest")
                starts.append(s)
            elif prev in by_digest:
                p = by_digest[prev]
                successors.setdefault(prev, []).append(s)
                if m["previous_boot"] != p.boot.name:
                    report.add(mpath, f"previous_boot says {m['previous_boot']!r} but the linked manifest is {p.boot.name}'s")
                if p.manifest is not None and idx != p.manifest["chain_index"] + 1:
                    report.add(mpath, f"chain_index {idx} does not follow {p.boot.name}'s {p.manifest['chain_index']}")
            elif prev in pruned:
                rec = pruned[prev]
                starts.append(s)
                if m["previous_boot"] != rec["boot"] or idx != rec["chain_index"] + 1:
                    report.add(mpath, f"does not match the prune record of {rec['boot']} (chain index {rec['chain_index']})")
            else:
                named = by_name.get(m["previous_boot"])
                if named is not None:
                    report.add(named.boot.path / MANIFEST, f"changed after {s.boot.name} was sealed: its SHA-256 is "
                               f"{named.digest}, {s.boot.name} recorded {prev}")
                else:
                    report.add(mpath, f"previous boot {m['previous_boot']} (manifest {prev[:16]}...) is gone and no "
                               "prune record covers it: a sealed boot was deleted")
        for prev, succ in successors.items():
            if len(succ) > 1:
                report.add(by_digest[prev].boot.path / MANIFEST,
                           f"chain forks here: {', '.join(x.boot.name for x in succ)} all link to it")
        if len(starts) > 1:
            report.add(self.root, f"the chain has {len(starts)} starts ({', '.join(x.boot.name for x in starts)}); "
                       "boots were removed from its middle or sealed without the lock")
        # Chain order for the report: walk from the start along single successors.
        order, cur = [], starts[0] if len(starts) == 1 else None
        while cur is not None and len(order) <= len(snapshot):
            order.append(cur.boot.name)
            nxt = successors.get(cur.digest or "", [])
            cur = nxt[0] if len(nxt) == 1 else None
        report.chain = order

    def prune(self, keep: int, *, dry_run: bool = False) -> PruneResult:
        """Delete the oldest sealed boots (chain order) so that ``keep`` sealed boots remain.

        Refuses unless the archive verifies, since pruning must not destroy evidence of damage.
        Incomplete boots are never touched. The cut is recorded first in a write-once PRUNED record,
        so verify accepts the first remaining boot's link to a manifest that no longer exists.
        """
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise ValueError(f"keep must be a whole number >= 0, got {keep!r}")
        report = self.verify()
        if not report.ok:
            raise ArchiveError(f"the archive does not verify ({len(report.problems)} problem(s)); run "
                               "`draft-head-fp8 archive verify`, resolve them, then prune")
        verified = set(report.chain)
        with _fd(self._open_root()) as root_fd, self._lock(root_fd, exclusive=True):
            boots, records, other = self._scan(root_fd)
            incomplete = [b.name for b in boots if not _exists_at(root_fd, f"{b.name}/{MANIFEST}")]
            entries = []
            for boot in boots:
                if boot.name in incomplete:
                    continue
                raw, doc = self._read_manifest(root_fd, boot)
                if doc is None:
                    raise ArchiveError(f"{boot.path / MANIFEST} became unreadable; run verify")
                entries.append((doc["chain_index"], boot, hashlib.sha256(raw).hexdigest()))
            entries.sort(key=lambda e: e[0])
            victims = []
            for idx, boot, digest in entries[: max(0, len(entries) - keep)]:
                if boot.name not in verified:  # sealed after our verify: keep it, and all after it
                    break
                victims.append((idx, boot, digest))
            kept = [b.name for _, b, _ in entries[len(victims):]]
            if dry_run:
                return PruneResult([b.name for _, b, _ in victims], kept, incomplete, None, True)
            for name, kind in other:  # leftovers of an earlier interrupted prune
                if name.startswith(_HIDE_PREFIX) and kind == "folder":
                    shutil.rmtree(self.root / name)
            if not victims:
                os.fsync(root_fd)
                return PruneResult([], kept, incomplete, None, False)
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            record_name = f"{PRUNED_PREFIX}{stamp}-{secrets.token_hex(4)}.json"
            record = {
                "schema": PRUNED_SCHEMA,
                "pruned_at": utc_now(),
                "keep": keep,
                "boots": [{"boot": b.name, "seq": b.seq, "launch_id": b.launch_id, "chain_index": idx,
                           "manifest_sha256": d} for idx, b, d in victims],
            }
            try:
                durable.create_exclusive_at(root_fd, record_name, _encode_json(record), mode=_FILE_MODE)
            except OSError as exc:
                raise _wrap_os_error(exc, f"writing the prune record {self.root / record_name}") from exc
            for _, boot, _ in victims:
                hidden = _HIDE_PREFIX + boot.name
                if _exists_at(root_fd, hidden):
                    shutil.rmtree(self.root / hidden)
                os.rename(boot.name, hidden, src_dir_fd=root_fd, dst_dir_fd=root_fd)
                os.fsync(root_fd)
                shutil.rmtree(self.root / hidden)
            os.fsync(root_fd)
        return PruneResult([b.name for _, b, _ in victims], kept, incomplete, str(self.root / record_name), False)

