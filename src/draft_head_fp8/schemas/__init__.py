"""JSON Schemas shipped with the package, and one way to check a document against them."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

RECEIPT_V2 = "runtime-receipt-v2"
DIAGNOSTICS_V1 = "diagnostics-v1"


@cache
def load(name: str) -> dict:
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def _validator(name: str) -> Any:
    import jsonschema

    schema = load(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def errors(name: str, document: Any) -> list[str]:
    """Every way ``document`` departs from schema ``name``, each as 'path: message'; [] if none."""
    validator = _validator(name)
    if validator.is_valid(document):
        return []
    found = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}" for e in found]
