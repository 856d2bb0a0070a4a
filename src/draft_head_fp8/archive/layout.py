"""The archive's vocabulary, defined once: names on disk, schema ids, modes, the storage format.

Layout of the root::

    .lock                            flock target; serialises sequence numbers, seals and prunes
    00000001-<launch id>/            one engine start ("boot"), folder 0700, files 0600
        boot.json                    identity, written when the boot begins (or is first joined)
        receipts/..., diagnostics/...  the boot's bytes, exactly as given
        MANIFEST.json                written last by seal(): files, sizes, SHA-256, chain link
    PRUNED-<time>-<rand>.json        write-once record of boots removed by prune()
"""

from __future__ import annotations

import re
from pathlib import Path

from draft_head_fp8.evidence.encoding import document_bytes
from draft_head_fp8.settings import ARCHIVE_ENV, archive_root

APPNAME = "draft-head-fp8"
ROOT_ENV = ARCHIVE_ENV  # the variable that names the root, spelled once in settings
BOOT_JSON = "boot.json"
MANIFEST = "MANIFEST.json"
LOCK_NAME = ".lock"
PRUNED_PREFIX = "PRUNED-"
# boot.json's optional list of the files a multi-rank boot waits for before it may be sealed.
EXPECTED_FILES = "expected_files"
MANIFEST_SCHEMA = "draft-head-fp8-archive-manifest/v1"
PRUNED_SCHEMA = "draft-head-fp8-archive-pruned/v1"
# The documents themselves, schemas/<name>.schema.json, as draft_head_fp8.schemas names them.
MANIFEST_SCHEMA_FILE = "archive-manifest-v1"
PRUNED_SCHEMA_FILE = "archive-pruned-v1"
SEALED, INCOMPLETE = "sealed", "incomplete"

SEQ_WIDTH = 8
BOOT_NAME = re.compile(r"^(\d{8,})-([A-Za-z0-9_-]{1,64})$")
LAUNCH_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PRUNED_NAME = re.compile(r"^PRUNED-[0-9A-Za-z_-]+\.json$")
# A boot being pruned is first renamed to this hidden name, so an interrupted prune never leaves a
# half-deleted folder that looks like a damaged boot.
HIDE_PREFIX = ".pruned-"
DIR_MODE, FILE_MODE = 0o700, 0o600


def default_root() -> Path:
    """``$DRAFT_HEAD_FP8_ARCHIVE``, else the per-user state folder (platformdirs)."""
    named = archive_root()
    if named:
        return Path(named).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir(APPNAME, appauthor=False))


# The one storage format of every evidence file, archive records included; verify re-encodes a
# manifest and compares bytes, which is why it must be stable.
encode_json = document_bytes


def boot_name(seq: int, launch_id: str) -> str:
    return f"{seq:0{SEQ_WIDTH}d}-{launch_id}"


def check_launch_id(launch_id: str) -> str:
    if not isinstance(launch_id, str) or not LAUNCH_ID.fullmatch(launch_id) or launch_id.isdigit():
        raise ValueError(
            f"launch id {launch_id!r} must be 1-64 of [A-Za-z0-9_-] and not all digits"
        )
    return launch_id
