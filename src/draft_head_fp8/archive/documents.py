"""The archive's JSON documents: parsing, the one test of "valid", the manifest's own digest, and
boot.json's list of expected files.

"Valid" is the shipped JSON Schema (schemas/archive-*-v1.schema.json) and nothing else: the fast
yes/no is ``_schemas().is_valid`` (the schema compiled without jsonschema, so engine start never
imports it) and ``explain`` asks jsonschema why, only once something was rejected.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import re
from typing import Any

from .layout import EXPECTED_FILES, MANIFEST_SCHEMA_FILE, PRUNED_SCHEMA_FILE


def load_json(raw: bytes) -> Any:
    """Parse an archive document. Decimal for non-integers: seal and prune write integers only,
    and JSON Schema's "integer" takes 1.0, so a float would let `"seq": 1.0` pass for `1`;
    a Decimal is no "integer" to jsonschema or to the fast check."""
    return json.loads(raw, parse_float=decimal.Decimal)


def _schemas() -> Any:
    # Imported on first use: a seal with no prune records in the root never needs it.
    from .. import schemas

    return schemas


def manifest_ok(doc: Any) -> bool:
    return _schemas().is_valid(MANIFEST_SCHEMA_FILE, doc)


def pruned_ok(doc: Any) -> bool:
    return _schemas().is_valid(PRUNED_SCHEMA_FILE, doc)


def explain_manifest(doc: Any) -> list[str]:
    return _schemas().errors(MANIFEST_SCHEMA_FILE, doc) or ["a value has the wrong type or form"]


def explain_pruned(doc: Any) -> list[str]:
    return _schemas().errors(PRUNED_SCHEMA_FILE, doc) or ["a value has the wrong type or form"]


def self_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest's other fields in RFC 8785 form: its own ``manifest_sha256``."""
    import rfc8785

    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def schema_major(value: Any, family: str) -> int | None:
    m = re.fullmatch(re.escape(family) + r"/v(\d+)", value) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


class BadExpectedFiles(ValueError):
    """boot.json's expected_files is there but not a list of file names."""


def expected_files_of(identity: dict[str, Any]) -> list[str] | None:
    """The files a multi-rank boot waits for, or None for a boot that waits for nothing."""
    value = identity.get(EXPECTED_FILES)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadExpectedFiles(f"{EXPECTED_FILES} in boot.json is not a list of file names")
    return value
