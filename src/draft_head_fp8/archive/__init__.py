"""Per-boot diagnostic archive (docs/contract.md, "Archive"): every engine start's receipts and
diagnostics, byte for byte, in a numbered folder sealed by a manifest, the manifests hash-chained.

One concern per module; the vocabulary (names on disk, schema ids, modes) is layout.py's:

    layout.py     names, schema ids, modes, the storage format, the default root
    errors.py     the named errors
    fs.py         no-follow opens relative to open folders, reads, hashing, flock, name checks
    identity.py   what boot.json records about the engine start
    documents.py  parsing archive documents; "valid" is the shipped JSON Schema
    rootdir.py    the root folder: open, lock, scan
    chain.py      the chain head, a new manifest's link, prune records
    boot.py       Boot: read, add, seal (and seal_if_complete for multi-rank boots)
    store.py      Archive: begin_boot, join_boot, boots, find
    verify.py     verify and its report
    prune.py      prune and its result
    diff.py       two boots compared field by field

Write-once files are ``draft_head_fp8.durable``'s (receipts use them too). The ``archive``
command is ``cli/archive.py``'s. Importing this package must stay
cheap and must not import torch or vLLM: it runs in every engine start. jsonschema is imported
only to explain a rejected document, rfc8785 only where a manifest's own digest is computed.
"""

from __future__ import annotations

from .boot import Boot
from .errors import (
    ArchiveError,
    ArchiveNotFoundError,
    BootIncompleteError,
    BootSealedError,
    InvalidNameError,
    UnknownBootError,
    UnsafePathError,
)
from .identity import collect_identity
from .layout import (  # noqa: F401 - the vocabulary, importable from here as before
    APPNAME,
    BOOT_JSON,
    EXPECTED_FILES,
    INCOMPLETE,
    LOCK_NAME,
    MANIFEST,
    MANIFEST_SCHEMA,
    PRUNED_PREFIX,
    PRUNED_SCHEMA,
    ROOT_ENV,
    SEALED,
    default_root,
)
from .prune import PruneResult
from .store import Archive
from .verify_report import Problem, VerifyReport

__all__ = [
    "Archive",
    "ArchiveError",
    "ArchiveNotFoundError",
    "Boot",
    "BootIncompleteError",
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
