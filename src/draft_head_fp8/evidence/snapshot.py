"""A tensor snapshot: what the receipt records about one tensor. Metadata only, never values.

``finite`` and ``positive_scalar`` are read from recorded facts when the object carries them (an
attribute, not a method: ``torch.Tensor.positive`` is the identity function, and ``bool()`` of a
bound method is always True), else measured by the torch mechanism in ``draft_head_fp8.fp8``.
"""

from __future__ import annotations

from typing import Any


def call_or_none(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # a snapshot reports what it could not read as None, never raises
        return None


def recorded_fact(value: Any, name: str) -> bool:
    return hasattr(value, name) and not callable(getattr(value, name, None))


def tensor_snapshot(
    value: Any, *, finite: bool = False, positive_scalar: bool = False
) -> dict | None:
    if value is None:
        return None
    snapshot: dict[str, Any] = {}
    dtype = getattr(value, "dtype", None)
    snapshot["dtype"] = None if dtype is None else str(dtype)
    shape = getattr(value, "shape", None)
    snapshot["shape"] = None if shape is None else call_or_none(lambda: [int(d) for d in shape])
    device = getattr(value, "device", None)
    snapshot["device"] = None if device is None else str(device)
    if callable(getattr(value, "numel", None)):
        snapshot["numel"] = call_or_none(lambda: int(value.numel()))
    if finite:
        if recorded_fact(value, "finite"):
            snapshot["finite"] = bool(value.finite)
        else:
            from draft_head_fp8.fp8 import is_finite

            snapshot["finite"] = call_or_none(lambda: is_finite(value))
    if positive_scalar:
        if recorded_fact(value, "positive"):
            snapshot["positive_scalar"] = bool(value.positive)
        else:
            from draft_head_fp8.fp8 import is_positive_scalar

            snapshot["positive_scalar"] = call_or_none(lambda: is_positive_scalar(value))
    data_ptr = call_or_none(lambda: int(value.data_ptr()))
    if data_ptr is not None:
        snapshot["data_ptr"] = data_ptr
    return snapshot
