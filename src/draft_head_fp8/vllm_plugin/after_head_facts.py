"""What vLLM's source says a drafter does with its head's logits after the head, beyond what
``compute_logits`` shows (read with ``ast``, nothing imported): candidates read as
log-probabilities, and projections of its own onto the vocabulary whose output is added to the
head's logits. Facts for ``verdicts`` (``ClassFacts``), each a reason of its own kind.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from draft_head_fp8.vllm_plugin import build_facts, class_source
from draft_head_fp8.vllm_plugin.class_source import ClassRef

TOP_K = "get_top_k_tokens"  # vLLM's vocab-parallel top-k of a head (LogitsProcessor)


def _is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def candidate_log_probs(chain: tuple[ClassRef, ...]) -> str | None:
    """The call by which ``compute_candidates`` asks for its top-k as log-probabilities
    (``return_log_probs=True``: the values less the whole row's logsumexp), else None."""
    found = class_source.method(chain, "compute_candidates")
    if found is None:
        return None
    for node in ast.walk(found[1]):
        if isinstance(node, ast.Call) and class_source.name_of(node.func) == TOP_K:
            if any(k.arg == "return_log_probs" and _is_true(k.value) for k in node.keywords):
                return f"{found[0].name}.compute_candidates: {TOP_K}(..., return_log_probs=True)"
    return None


def _onto_vocabulary(value: ast.AST) -> bool:
    """An ``nn.Linear`` whose output size names the vocabulary."""
    if not isinstance(value, ast.Call) or class_source.name_of(value.func) != "Linear":
        return False
    out = [k.value for k in value.keywords if k.arg == "out_features"] or value.args[1:2]
    return any("vocab" in ast.unparse(node) for node in out)


def vocab_terms(chain: tuple[ClassRef, ...]) -> Iterator[str]:
    """Each module the class builds that projects onto the vocabulary with a linear layer of its
    own (not a ``ParallelLMHead``: no head the plugin could serve), as ``Class.attribute``."""
    for cls in build_facts.built(chain):
        for ref, name, value in class_source.self_assignments(class_source.lineage(cls)):
            if _onto_vocabulary(value):
                yield f"{ref.name}.{name}"
