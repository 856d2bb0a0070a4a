"""Is this document a valid receipt? Its schema first, then every check of its kind: the
post-share checks (v2, v3: the start-up proof), or a later proof's (v4: after a weight update).

The one answer that ``receipt validate``, the demo and ``compare`` give.
"""

from __future__ import annotations

from typing import Any

from draft_head_fp8 import schemas
from draft_head_fp8.evidence import RECEIPT_V2, RECEIPT_V3, several_heads
from draft_head_fp8.evidence.checks import validate_post_share_receipt
from draft_head_fp8.evidence.checks_update import validate_post_update_receipt
from draft_head_fp8.evidence.receipt_update import RECEIPT_V4
from draft_head_fp8.policy import HeadFp8EligibilityError

# schema id -> the JSON Schema file it must match
RECEIPT_SCHEMAS = {
    RECEIPT_V2: schemas.RECEIPT_V2,
    RECEIPT_V3: schemas.RECEIPT_V3,
    RECEIPT_V4: schemas.RECEIPT_V4,
}


def receipt_verdict(document: Any) -> str | None:
    """None when the document is a valid receipt (post-share, or a later proof), else the first
    reason it is not."""
    schema = _schema(document)
    if isinstance(document, dict) and schema is None:
        known = " or ".join(repr(s) for s in RECEIPT_SCHEMAS)
        return f"schema {document.get('schema')!r} is not {known}"
    problems = schemas.errors(RECEIPT_SCHEMAS.get(schema, schemas.RECEIPT_V2), document)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"does not match the {_version(document)} receipt schema: {problems[0]}{more}"
    try:
        if schema == RECEIPT_V4:  # a later proof: the head proven again after a weight update
            validate_post_update_receipt(document)
        else:
            validate_post_share_receipt(document)
    except HeadFp8EligibilityError as exc:
        return str(exc)
    # A drafter with a head per draft layer: every head proven, each by its own receipt.
    return several_heads.failure(document, receipt_verdict)


def _schema(document: Any) -> str | None:
    # Only a string can name a schema: a list or a dict under "schema" is not even hashable.
    schema = document.get("schema") if isinstance(document, dict) else None
    return schema if type(schema) is str and schema in RECEIPT_SCHEMAS else None


def _version(document: Any) -> str:
    schema = _schema(document)
    return schema.rsplit("/", 1)[-1] if schema else "v2"
