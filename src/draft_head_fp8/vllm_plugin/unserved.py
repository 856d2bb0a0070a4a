"""Drafters no family serves (EAGLE-3, DFlash, the MTP models of other families): with the flag
on, each of vLLM's speculative-decoding architectures that no family claims is registered to a
class that refuses at construction, before the drafter loads a weight. Without this such a drafter
would start with its BF16 head and no receipt, and the flag would have been silently ignored. The
refusal says why, in the architecture's own verdict (``registry_facts``, ``verdicts``): the same
sentence ``draft-head-fp8 check --drafters`` prints.

The refusing class subclasses vLLM's own (made on first use, like the families' classes), so
vLLM's registry inspects what it always inspects; only ``__init__`` differs.
"""

from __future__ import annotations

from functools import cache

from draft_head_fp8.families import all_families
from draft_head_fp8.policy import unserved_drafter
from draft_head_fp8.vllm_plugin import refusal, vllm_classes

UNSERVED_PREFIX = "DraftHeadFp8Unserved"


@cache
def architectures() -> dict[str, str]:
    """vLLM's speculative-decoding architectures that no family serves -> ``module:Class``."""
    served = {architecture for family in all_families() for architecture in family.drafters}
    return {
        architecture: where
        for architecture, where in vllm_classes.speculative_architectures().items()
        if architecture not in served
    }


def registry_entry(architecture: str) -> str:
    return f"{__name__}:{UNSERVED_PREFIX}{architecture}"


def refusing_class(name: str) -> type:
    architecture = name.removeprefix(UNSERVED_PREFIX)
    if not name.startswith(UNSERVED_PREFIX) or architecture not in architectures():
        raise AttributeError(f"{__name__} has no class {name!r}")
    served = sorted({a for family in all_families() for a in family.drafters})
    # The class vLLM builds for it here, resolved as vLLM resolves it.
    base = vllm_classes.vllm_class(architecture)
    reason = unserved_drafter(architecture, served, why(architecture, base))
    return refusal.refusing_class(name, base, reason, __name__)


def why(architecture: str, base: type) -> str | None:
    """The architecture's verdict reason (``verdicts``), judged from the source of ``base``, the
    class vLLM builds for it here; None where judging fails (the refusal stands all the same)."""
    return _why(architecture, vllm_classes.qualified(base))


@cache
def _why(architecture: str, built: str) -> str | None:
    from draft_head_fp8.vllm_plugin import registry_facts

    try:
        return registry_facts.verdict_for(architecture, built).reason
    except Exception:  # a refusal must never fail for want of its explanation
        return None


def __getattr__(name: str) -> type:
    return refusing_class(name)
