"""The named errors of the package, defined once. Pure: no torch, no vLLM."""

from __future__ import annotations


class HeadFp8EligibilityError(ValueError):
    """An explicitly requested FP8 draft head is unsafe, or a receipt failed validation."""


class ProofNotKept(RuntimeError):
    """A boot's proof could not be archived: an engine that cannot keep its proof does not
    start."""
