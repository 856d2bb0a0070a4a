"""The one JSON encoding of every evidence file: receipts, diagnostics, archive records.

Stable by construction (sorted keys, fixed indent, trailing newline, ASCII-only escapes), so that
whoever re-encodes a parsed document gets its bytes back, which is what archive verification
compares.
"""

from __future__ import annotations

import json
from typing import Any


def document_bytes(document: Any) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")
