"""The installed vLLM's speculative-decoding registry, judged: for every architecture in vLLM's
``_SPECULATIVE_DECODING_MODELS`` (read through ``seams``), the class vLLM builds for it here,
the facts its source says about its head (``head_facts``), and the verdict (``verdicts``, pure).

Nothing here lists architectures: a release that adds one gets a verdict from its class's
source, "not judged yet" where no judgment fits. The class vLLM builds is resolved as vLLM
resolves it (``vllm_classes``), importing its model file; where that import fails here (CUDA-only
packages, a platform that refuses), the class its table names is read from source instead, and
the failure is a fact of the verdict.
"""

from __future__ import annotations

import re
from functools import cache

from draft_head_fp8.families import all_families
from draft_head_fp8.families.family import Family
from draft_head_fp8.verdicts import ClassFacts, Verdict, judge
from draft_head_fp8.vllm_plugin import class_source, head_facts, vllm_classes

# An import error is kept to its first line, this long at most (some run to a page).
_ERROR_CHARS = 200
_PATH = re.compile(r"\s*\((?:/|[A-Za-z]:\\)[^)]*\)")


def _read(architecture: str, where: str, **known: object) -> ClassFacts:
    module, _, name = where.partition(":")
    ref = class_source.find_class(module, name)
    if ref is None:
        return ClassFacts(architecture, vllm_class=where, read=False, **known)  # type: ignore[arg-type]
    return head_facts.facts(architecture, ref, **known)


@cache
def built_here(architecture: str) -> tuple[str, str | None]:
    """(``module:Class`` vLLM builds for ``architecture`` here, why it cannot, if it cannot):
    where its model file does not import here, the class vLLM's table names. Once per process:
    a second import of a model file that failed can fail otherwise."""
    try:
        return vllm_classes.qualified(vllm_classes.vllm_class(architecture)), None
    except Exception as exc:  # a model file that refuses this platform, or lacks a package
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        # Without where this machine keeps its files: the same error reads the same anywhere.
        message = _PATH.sub("", message)
        error = f"{type(exc).__name__}: {message}"[:_ERROR_CHARS]
        return vllm_classes.speculative_architectures()[architecture], error


@cache
def served_facts() -> dict[str, tuple[Family, ClassFacts]]:
    """Each family's architecture -> the family and the facts of the class it was written for,
    read from this vLLM's source (nothing imported)."""
    return {
        architecture: (family, _read(architecture, where))
        for family in all_families()
        for architecture, where in family.drafters.items()
    }


def facts_for(architecture: str, built: str, import_error: str | None = None) -> ClassFacts:
    """The facts of ``built`` (``module:Class``), the class vLLM builds for ``architecture``."""
    return _read(architecture, built, import_error=import_error)


def verdict_for(architecture: str, built: str, import_error: str | None = None) -> Verdict:
    """The verdict on ``architecture``, whose class here is ``built``."""
    facts = facts_for(architecture, built, import_error)
    return judge(facts, all_families(), served_facts())


def verdict(architecture: str) -> Verdict:
    """The verdict on one architecture of the installed vLLM (importing its model file)."""
    return verdict_for(architecture, *built_here(architecture))


def verdicts() -> list[Verdict]:
    """Every speculative-decoding architecture of the installed vLLM, judged, by name."""
    return [verdict(a) for a in sorted(vllm_classes.speculative_architectures())]


def release() -> dict[str, str | None]:
    """The installed vLLM the verdicts are of."""
    import vllm

    return {"version": getattr(vllm, "__version__", None)}
