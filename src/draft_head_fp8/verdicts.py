"""A verdict for every speculative-decoding architecture of the installed vLLM: served by a
family, refused with a reason naming what its class does that the plugin does not prove, or not
judged yet. Pure: no torch, no vLLM import.

Judgments are keyed by what can be known about the class, never by a list of architecture names:
the facts (``ClassFacts``) are read from vLLM's own source of the class by
``vllm_plugin/head_facts.py``; the family records say what is served (``Family.drafters``); the
table ``KINDS`` (``verdict_kinds``) says, per kind of class, what the plugin does not prove and
what would change that. A class whose facts fit no kind is "not judged yet", which the flag
refuses as well. The reasons are a contract (docs/contract.md, "Drafters no family serves").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from os.path import commonprefix
from typing import Any

from draft_head_fp8.families.family import AT_SHARE, Family
from draft_head_fp8.policy import unexpected_drafter_class
from draft_head_fp8.verdict_kinds import KINDS, REFUSED, STATUSES

# has_own_lm_head as vLLM's proposer reads it: absent, the MTP drafters (always handed the
# target's head); set from the checkpoint, or a constant, the EAGLE-type drafters.
ABSENT, PER_CHECKPOINT = "absent", "per checkpoint"
# The heads vLLM's proposer replaces with the target's at the share: ``lm_head``, and each MTP
# layer's ``shared_head.head`` under ``model.layers`` (the share the plugin proves).
SHARED_PATHS = ("lm_head", "model.layers[].shared_head.head")
# vLLM's parallel-drafting EAGLE architectures are named for it (``speculators`` "peagle").
PARALLEL_DRAFTING = "peagle"
NEEDS = "needs a family record, a tiny checkpoint and an engine test"
# An import error that says the platform, not this environment, is what lacks (CUDA-only
# packages, a model file that refuses the platform): vLLM cannot build the class here at all.
PLATFORM_ERRORS = ("NotImplementedError", "CUDA", "GPU", "ROCm", "flash_attn", "deep_gemm")
# The judgments that say what would make the class served: on a platform where vLLM cannot
# import it, what it lacks here comes first; where its source says it cannot build or draft
# here, that comes first of these and of block drafting (which says the same: an engine test).
_CANDIDATES = ("reads like a family", "same class", "parallel drafting", "not judged")
_SOURCE_FIRST = (
    *_CANDIDATES,
    "block drafting",
    "markov term",
    "own draft steps",
    "own heads per layer",
)


@dataclass(frozen=True)
class ClassFacts:
    """What vLLM's source of the class vLLM builds for an architecture says about its head."""

    architecture: str
    vllm_class: str | None = None  # module:Class vLLM builds (here, or as its table names it)
    read: bool = True  # whether the class's source was found and read
    lineage: tuple[str, ...] = ()  # the class and its vLLM bases, by name
    import_error: str | None = None  # why vLLM cannot import its model file here
    config_error: str | None = None  # why no config a class here reads makes vLLM draft with it
    attribute_error: str | None = None  # what its forward reads that a module it builds lacks
    build_error: str | None = None  # why, read from its source, vLLM cannot build it here
    kernel_error: str | None = None  # the compiled operator its model files call, absent here
    draft_error: str | None = None  # why, read from its source, it builds here but cannot draft
    raises: str | None = None  # what its __init__ raises before building anything
    compute_logits: bool = True
    logits_heads: tuple[str, ...] = ()  # what compute_logits hands logits_processor as the head
    logits_changes: tuple[str, ...] = ()  # what it does to the logits besides ("masks: ...")
    top_tokens: str | None = None  # get_top_tokens: None, "head" (through it), or what it calls
    candidate_log_probs: str | None = None  # the call that reads its candidates as log-probs
    vocab_terms: tuple[str, ...] = ()  # its own projections onto the vocabulary (Class.attr)
    # what vLLM's DSpark speculator asks of it where it has it: "name (how; who asks)"
    speculator_hooks: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()  # where it builds a ParallelLMHead (model.layers[].x.head)
    has_own_lm_head: str = ABSENT  # ABSENT, "True", "False" or PER_CHECKPOINT
    d2t: bool = False  # maps draft token ids to the target's


@dataclass(frozen=True)
class Verdict:
    architecture: str
    vllm_class: str | None
    head: str  # how its head is read, in a few words
    status: str  # SERVED, REFUSED or NOT_JUDGED
    kind: str  # the judgment's key in KINDS
    reason: str
    family: str | None = None  # the family serving it, or the one whose head it reads alike

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mode(facts: ClassFacts) -> str:
    """Whose head vLLM's proposer leaves the drafter: always the target's (an MTP drafter, or
    ``has_own_lm_head`` False), the checkpoint's choice, or its own (unless equal)."""
    if facts.has_own_lm_head in (ABSENT, "False"):
        return "target"
    return "checkpoint" if facts.has_own_lm_head == PER_CHECKPOINT else "own"


def _style(facts: ClassFacts) -> str:
    return "MTP" if facts.has_own_lm_head == ABSENT else "EAGLE"


def extra_heads(facts: ClassFacts) -> tuple[str, ...]:
    """Heads the class builds besides the ones vLLM's share replaces and its logits read."""
    return tuple(h for h in facts.heads if h not in SHARED_PATHS and h not in facts.logits_heads)


def head_reading(facts: ClassFacts) -> str:
    """How the class's head is read, in a few words (the table's "head" column)."""
    if not facts.read:
        return "unread"
    if facts.raises:
        return "none: refuses this platform"
    if not facts.compute_logits:
        return "none: no compute_logits"
    reads = ", ".join(facts.logits_heads) or "unread"
    if any("embed" in h for h in facts.logits_heads):
        text = f"an embedding: {reads}"
    else:
        whose = {
            "target": "the target's, shared",
            "checkpoint": "its own if its checkpoint has one, else the target's",
            "own": "its own",
        }[_mode(facts)]
        own = facts.has_own_lm_head
        text = f"{whose} ({'an MTP share' if own == ABSENT else f'has_own_lm_head {own}'}): "
        text += reads
    extras = extra_heads(facts)
    if extras:
        text += f"; also {', '.join(extras)}"
    return text + ("; d2t" if facts.d2t else "")


def _prefix(a: str | None, b: str | None) -> tuple[int, int]:
    """How alike two ``module:Class`` names are: the model file's name below vLLM's model
    packages, then the class's, by common prefix."""
    (ma, _, ca), (mb, _, cb) = (a or "").partition(":"), (b or "").partition(":")
    ma, mb = ma.rpartition("models.")[2], mb.rpartition("models.")[2]
    return len(commonprefix([ma, mb])), len(commonprefix([ca, cb]))


def family_alike(
    facts: ClassFacts, served: Mapping[str, tuple[Family, ClassFacts]]
) -> Family | None:
    """The served family whose class reads its head as this class does, through the share the
    plugin proves (``lm_head``, each MTP layer's ``shared_head.head``): None where none does."""
    reads = set(facts.logits_heads)
    if not reads or not reads <= set(SHARED_PATHS) or _mode(facts) == "own":
        return None
    ranked = []
    for family, theirs in served.values():
        if theirs.d2t != facts.d2t or _mode(theirs) == "own" or not theirs.logits_heads:
            continue
        if _block_drafter(theirs) is not None:  # drafts a block: no other class drafts alike
            continue
        if not set(theirs.logits_heads) <= set(SHARED_PATHS):
            continue
        if family.head.when != AT_SHARE and not theirs.d2t:
            continue
        score = (
            set(theirs.logits_heads) == reads,
            _style(theirs) == _style(facts),
            _mode(theirs) == _mode(facts),
            set(theirs.heads) == set(facts.heads),
            _prefix(theirs.vllm_class, facts.vllm_class),
        )
        ranked.append((score, family.name, family))
    if not ranked:
        return None
    best = max(ranked, key=lambda item: item[0])[0]
    return min((name, family) for score, name, family in ranked if score == best)[1]


def _kind(facts: ClassFacts, served: Mapping[str, tuple[Family, ClassFacts]]) -> tuple[str, dict]:
    """The kind of the class, and what its reason names: the first judgment that applies."""
    if not facts.read:
        return "not judged", {"why": "vLLM's source of its class could not be read"}
    if facts.raises:
        return "raises here", {"raises": facts.raises}
    if not facts.compute_logits:
        return "no head", {}
    steps = _own_steps(facts, served)
    if steps:
        return "own draft steps", {"extra": "; ".join(steps)}
    extras = extra_heads(facts)
    markov = [h for h in extras if "markov" in h.lower()]
    if markov:
        return "markov term", {"extra": ", ".join(markov)}
    if extras:
        return "several heads", {"extra": ", ".join(extras), "layered": _served_layer_heads(served)}
    per_layer = [h for h in facts.logits_heads if "[]" in h]
    if _mode(facts) == "own" and per_layer:
        return "own heads per layer", {
            "extra": ", ".join(per_layer),
            "own": facts.has_own_lm_head,
            "layered": _served_layer_heads(served),
        }
    if facts.logits_changes:
        return "logits changed", {"extra": "; ".join(facts.logits_changes)}
    if facts.top_tokens not in (None, "head"):
        return "own top tokens", {"extra": facts.top_tokens}
    embeddings = [h for h in facts.logits_heads if "embed" in h]
    if embeddings:
        return "embedding head", {"extra": ", ".join(embeddings)}
    if facts.candidate_log_probs:
        return "log-probability candidates", {"extra": facts.candidate_log_probs}
    if facts.vocab_terms:
        return "vocabulary term", {"extra": ", ".join(facts.vocab_terms)}
    alike = family_alike(facts, served)
    flash = _block_drafter(facts)
    if flash is not None:
        return "block drafting", {"extra": flash, "blocks": _served_blocks(served)}
    if PARALLEL_DRAFTING in facts.architecture.lower() and alike is not None:
        return "parallel drafting", {
            "alike": f"reading its head like {alike.name}",
            "family": alike.name,
        }
    same = [f for f, theirs in served.values() if theirs.vllm_class == facts.vllm_class]
    if same:
        return "same class", {"family": same[0].name}
    if alike is not None:
        return "reads like a family", {"family": alike.name}
    return "not judged", {"why": _unjudged(facts)}


def _own_steps(facts: ClassFacts, served: Mapping[str, tuple[Family, ClassFacts]]) -> list[str]:
    """What vLLM's DSpark speculator asks of the class that no served family's class has (those
    the engine tests run through)."""
    known = {h.partition(" ")[0] for _, theirs in served.values() for h in theirs.speculator_hooks}
    return [h for h in facts.speculator_hooks if h.partition(" ")[0] not in known]


def _block_drafter(facts: ClassFacts) -> str | None:
    """The DFlash class in the lineage of a class that drafts a block per step, else None."""
    return next((name for name in facts.lineage if "DFlash" in name), None)


def _served_blocks(served: Mapping[str, tuple[Family, ClassFacts]]) -> str:
    """The served families that draft a block per step, each with its first class: the one its
    tiny checkpoint and engine test run (a record may serve a subclass beside it, unrun)."""
    found = {
        f"{family.name} ({(theirs.vllm_class or '').rpartition(':')[2]})"
        for family, theirs in served.values()
        if _block_drafter(theirs) and theirs.vllm_class == next(iter(family.drafters.values()))
    }
    return ", ".join(sorted(found)) or "no family"


def _served_layer_heads(served: Mapping[str, tuple[Family, ClassFacts]]) -> str:
    """The served families with a head per draft layer, each with its class."""
    found = {
        f"{family.name} ({(theirs.vllm_class or '').rpartition(':')[2]})"
        for family, theirs in served.values()
        if family.layer_heads is not None
    }
    return ", ".join(sorted(found)) or "no family"


def _unjudged(facts: ClassFacts) -> str:
    reads = ", ".join(facts.logits_heads) or "nothing readable"
    if _mode(facts) == "own":
        return (
            f"it keeps a head of its own (has_own_lm_head {facts.has_own_lm_head}; logits from "
            f"{reads}), which no served family's class reads alike"
        )
    return (
        f"its logits come from {reads}, not where vLLM's proposer hands it the target's head "
        f"({', '.join(SHARED_PATHS)}), and no served family's class reads its head alike"
    )


# The one missing module a test-only stand-in is known to carry through vLLM's imports, with
# nothing it computes changed (tests/shims/README.md; checked for each such model file).
STAND_IN = ("No module named 'torchvision'", "tests/shims/torchvision")


def _to_import(error: str) -> str:
    """What would get a model file that does not import here through its import."""
    missing, stand_in = STAND_IN
    if missing in error:
        return (
            f"the test-only stand-in {stand_in} (what the engine tests of the families whose "
            "model files import torchvision run with) gets it through that import without "
            "changing what it computes: an engine test of it runs with that on its path"
        )
    return "an engine test of it needs an environment where it imports"


def judge(
    facts: ClassFacts,
    families: Sequence[Family],
    served: Mapping[str, tuple[Family, ClassFacts]],
) -> Verdict:
    """The verdict on one architecture: ``served`` maps each family's architecture to the family
    and the facts of the class it wraps (read from the same vLLM)."""
    claimed = next((f for f in families if facts.architecture in f.drafters), None)
    fields: dict[str, Any] = {}
    if claimed is not None:
        written_for = claimed.drafters[facts.architecture]
        if facts.vllm_class not in (None, written_for) and facts.import_error is None:
            kind = "class moved"
            fields["moved"] = unexpected_drafter_class(
                facts.architecture, facts.vllm_class, written_for, claimed.name
            )
        else:
            kind = "served"
        fields["family"] = claimed.name
    else:
        kind, fields = _kind(facts, served)
    status, template = KINDS[kind]
    alike = fields.get("family")
    reason = template.format(
        **{"head": head_reading(facts), "needs": NEEDS, "cls": facts.vllm_class, **fields}
    )
    error = facts.import_error
    if error and kind in _SOURCE_FIRST and any(m in error for m in PLATFORM_ERRORS):
        kind, status = "cannot import here", REFUSED
        inner = reason.removeprefix("not judged yet: ")
        reason = KINDS[kind][1].format(error=error, inner=inner)
    elif (source := _source_error(facts)) is not None and kind in _SOURCE_FIRST:
        kind, found = source
        inner, status = reason.removeprefix("not judged yet: "), REFUSED
        reason = KINDS[kind][1].format(error=found, inner=inner)
    elif error and kind not in ("served", "raises here"):
        reason += f"; vLLM cannot import its model file here ({error}): {_to_import(error)}"
    if facts.config_error and kind not in ("served", "raises here"):
        # Not a refusal of its own: a tiny checkpoint that ships its config code, started with
        # trust_remote_code, engine-tests such a class here (interns2-mobius-mtp's does).
        found = facts.config_error
        reason += f"; vLLM drafts with it only from a checkpoint's own config code ({found})"
    return Verdict(
        architecture=facts.architecture,
        vllm_class=facts.vllm_class,
        head=head_reading(facts),
        status=status,
        kind=kind,
        reason=reason,
        family=alike,
    )


def _source_error(facts: ClassFacts) -> tuple[str, str] | None:
    """What, read from its source, keeps vLLM from building, running or drafting with the class
    here (the first of these, what holds on every platform before what holds on this one), as
    (kind, error)."""
    for kind, error in (
        ("fails in vLLM", facts.attribute_error),
        ("cannot build here", facts.build_error),
        ("cannot run here", facts.kernel_error),
        ("cannot draft here", facts.draft_error),
    ):
        if error:
            return kind, error
    return None


def counts(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """How many are served, refused (by kind) and not judged."""
    by_kind: dict[str, int] = {}
    for v in verdicts:
        if v.status == REFUSED:
            by_kind[v.kind] = by_kind.get(v.kind, 0) + 1
    return {
        "architectures": len(verdicts),
        **{status: sum(v.status == status for v in verdicts) for status in STATUSES},
        "refused_by_kind": dict(sorted(by_kind.items())),
    }
