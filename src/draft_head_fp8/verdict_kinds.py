"""The judgments ``verdicts.judge`` gives, by kind: (status, reason). Data in one place: the
reasons are a contract (docs/contract.md, "Drafters no family serves"), each with the facts it
names in braces. Pure: no torch, no vLLM import.
"""

from __future__ import annotations

SERVED, REFUSED, NOT_JUDGED = "served", "refused", "not judged yet"
STATUSES = (SERVED, REFUSED, NOT_JUDGED)

# The judgments, by kind: (status, reason). The reason says what the class does that the plugin
# does not prove, and what would change the verdict; {fields} come from the facts.
KINDS: dict[str, tuple[str, str]] = {
    "served": (SERVED, "served by the {family} family: a private FP8 head, proven at every start"),
    "class moved": (REFUSED, "{moved}"),
    "raises here": (
        REFUSED,
        "vLLM's class refuses this platform when built ({raises}): nothing can be built or "
        "proven here; judge it where vLLM builds it",
    ),
    "cannot import here": (
        REFUSED,
        "vLLM's model file for it does not import on this platform ({error}): nothing can be "
        "built or proven here; read from its source, it {inner}",
    ),
    "fails in vLLM": (
        REFUSED,
        "vLLM's own code fails when it drafts with it, on any platform ({error}): nothing can "
        "be proven with it; read from its source, it {inner}",
    ),
    "cannot build here": (
        REFUSED,
        "vLLM cannot build it on this platform ({error}): nothing can be built or proven here; "
        "read from its source, it {inner}",
    ),
    "cannot run here": (
        REFUSED,
        "vLLM cannot run it on this platform: its source calls a compiled operator this "
        "build lacks ({error}): nothing can be run or proven here; read from its source, it "
        "{inner}",
    ),
    "cannot draft here": (
        REFUSED,
        "vLLM builds and loads it on this platform but cannot draft with it ({error}): nothing "
        "can be proven here; read from its source, it {inner}",
    ),
    "no head": (
        REFUSED,
        "its class computes no logits (no compute_logits): there is no draft head to serve in FP8",
    ),
    "markov term": (
        REFUSED,
        "adds a low-rank Markov term ({extra}) to the head's logits: the FP8 head's exact pick "
        "is not the draft's argmax; serving it needs the exact pick made after that term, as "
        "qwen3-dspark's is for its class: a family record of its own, a tiny checkpoint and an "
        "engine test",
    ),
    "own draft steps": (
        REFUSED,
        "has what vLLM's DSpark speculator uses where the certified pick after the Markov term "
        "does not reach, and no served family's class has ({extra}): vLLM's draft is then "
        "picked from what it returns, or drafted by it, not from the head's logits plus the "
        "term that the pick (over the BF16 head plus the term, as qwen3-dspark's is for its "
        "class) makes exact; serving it needs the pick proven through that too: a family record "
        "of its own, a tiny checkpoint and an engine test",
    ),
    "several heads": (
        REFUSED,
        "drafts through several heads ({extra}): the plugin proves the head each draft step "
        "reads (the drafter's one head, or one per draft layer: {layered}), not several heads "
        "read together; serving it needs every head quantized, rescored and proven",
    ),
    "own heads per layer": (
        REFUSED,
        "keeps a head of its own in each draft layer ({extra}; has_own_lm_head {own}): several "
        "heads per drafter are served for {layered} only (each layer's head FP8 from its own "
        "checkpoint tensor, each pick certified against that head's BF16 rows, each head proven "
        "in the receipt), not for this class: {needs}",
    ),
    "logits changed": (
        REFUSED,
        "its compute_logits does more than logits_processor(head) ({extra}): the FP8 head's "
        "exact pick is not what the draft picks; serving it needs that step proven too",
    ),
    "own top tokens": (
        REFUSED,
        "picks greedy draft tokens without the head's logits (get_top_tokens: {extra}): the FP8 "
        "head's exact pick is never asked; serving it needs that pick made exact",
    ),
    "embedding head": (
        REFUSED,
        "takes its logits from an embedding ({extra}), not from a ParallelLMHead: the FP8 head "
        "method is never asked for them; serving it needs a family whose head is that embedding",
    ),
    "log-probability candidates": (
        REFUSED,
        "reads its candidates as log-probabilities ({extra}): each of the head's top-k values "
        "less the logsumexp of the whole row, every logit of the vocabulary, which an FP8 head "
        "gives exactly only by computing every row in BF16: nothing for FP8 to save; serve it "
        "with the flag unset",
    ),
    "vocabulary term": (
        REFUSED,
        "builds a projection of its own onto the vocabulary ({extra}) whose output its drafter "
        "adds to the head's logits before it picks, pass after pass: the FP8 head's exact pick "
        "is not the draft's; serving it needs the pick after that term proven where vLLM adds "
        "it, as qwen3-dspark's is after its Markov term",
    ),
    "block drafting": (
        REFUSED,
        "drafts a block of tokens in one pass (DFlash: {extra}) with a class no family serves: "
        "vLLM's block drafting is served for {blocks} only, each proven on the engine (every "
        "position of the block through the FP8 head and the exact pick), not for this class; "
        "its head: {head}; {needs}",
    ),
    "parallel drafting": (
        REFUSED,
        "drafts every token in one pass (P-EAGLE parallel drafting) with {cls}, "
        "{alike}; no engine test here runs parallel drafting; {needs}",
    ),
    "same class": (
        REFUSED,
        "vLLM builds it as {cls}, the class the {family} family serves, under another "
        "architecture name: not yet served: needs the architecture in the family's drafters, "
        "a tiny checkpoint of its own target and an engine test",
    ),
    "reads like a family": (
        REFUSED,
        "reads its head like {family} ({head}), the share the plugin already proves: not yet "
        "served: {needs}",
    ),
    "not judged": (
        NOT_JUDGED,
        "not judged yet: {why}; until someone reads vLLM's class and judges it, the flag refuses "
        "it",
    ),
}
