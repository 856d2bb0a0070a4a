"""JSON Schemas shipped with the package, and the ways to check a document against them:
``errors`` (jsonschema: every reason, for people) and ``is_valid`` (fastjsonschema: the same
answer from the same schema file, compiled once; fast enough for verify's thousand manifests and
cheap enough to import at engine start, where jsonschema's ~80 ms import is not welcome)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

RECEIPT_V2 = "runtime-receipt-v2"
RECEIPT_V3 = "runtime-receipt-v3"
RECEIPT_V4 = "runtime-receipt-v4"
DIAGNOSTICS_V5 = "diagnostics-v5"


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


@cache
def _compiled(name: str) -> Any:
    import fastjsonschema

    return fastjsonschema.compile(load(name))


def is_valid(name: str, document: Any) -> bool:
    """Whether ``document`` satisfies schema ``name``, as ``errors`` would say."""
    import fastjsonschema

    try:
        _compiled(name)(document)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def errors(name: str, document: Any) -> list[str]:
    """Every way ``document`` departs from schema ``name``, each as 'path: message'; [] if none."""
    validator = _validator(name)
    if validator.is_valid(document):
        return []
    found = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}" for e in found
    ]
