"""What a drafter family is: one record of facts, and the modules that matter resolved once.

A family says which of vLLM's drafter classes it wraps; what ``check`` reads from which config
(model types, the fields that decide eligibility); where the head's bytes come from (which
checkpoint tensor, in which folder) and when they exist (loaded with the drafter, or handed to it
at the share); which share vLLM's proposer performs and how the plugin sees it (the module name
whose registration is the share); and its tiny checkpoints. (Which receipt version proves a
head follows from where its bytes come from: ``evidence.receipt_v3.receipt_for_head``.)
Pure: no torch, no vLLM import (modules are duck-typed, configs read as dicts or objects).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# Whose folder holds a tensor, or a config.
DRAFT, TARGET = "draft", "target"
# When the head's bytes exist: loaded with the drafter's own weights, or handed to the drafter by
# vLLM's proposer after loading (the target's head, shared).
AT_LOAD, AT_SHARE = "load", "share"
# A term added to the head's logits before the pick: DSpark's low-rank Markov bias, and the
# head the term is computed through (a ParallelLMHead too, but no reference to the draft head).
MARKOV_TERM = "markov"
TERM_HEADS = {MARKOV_TERM: "model.markov_head.markov_w2"}


@dataclass(frozen=True)
class HeadSource:
    """Where the BF16 bytes the FP8 head is made from come from, and when they exist."""

    folder: str  # DRAFT or TARGET: the checkpoint folder that holds the tensor
    tensor: str  # its name in that folder's safetensors
    when: str  # AT_LOAD or AT_SHARE
    # The tensor instead, when that checkpoint ties its head to its embedding.
    tied_tensor: str | None = None
    # A head of the drafter's own (AT_LOAD) whose bytes are its own embedding's (an MTP assistant
    # whose lm_head.weight vLLM never loads), not a head tensor of its own (EAGLE-3's lm_head).
    tied_to_draft_embedding: bool = False

    def tensor_for(self, tied: bool) -> str:
        return self.tied_tensor if tied and self.tied_tensor else self.tensor


@dataclass(frozen=True)
class Modules:
    """The modules that matter, resolved once by ``resolve``: what the receipt, the exact pick's
    evidence, the probe and the post-share hook read instead of walking attributes."""

    drafter: Any
    target: Any  # the target's language model
    draft_heads: tuple[tuple[str, Any], ...]  # every (path, module) that serves as a draft head
    draft_embed: Any
    target_embed: Any
    target_head: Any

    @property
    def head(self) -> Any:
        """The draft head that serves (the first reference; the others must be the same)."""
        return self.draft_heads[0][1] if self.draft_heads else None


def present_or(value: Any, fallback: Any) -> Any:
    # Not `value or fallback`: a module that defines __len__ (ModuleList) can be falsy.
    return fallback if value is None else value


def language_model(model: Any) -> Any:
    """A multimodal target's language model, else the model itself (vLLM's own accessor)."""
    get = getattr(model, "get_language_model", None)
    return get() if callable(get) else model


def is_head(module: Any) -> bool:
    # vLLM's ParallelLMHead by name and place, so that this module imports no vLLM.
    cls = type(module)
    return any(
        c.__name__ == "ParallelLMHead" and c.__module__.endswith("vocab_parallel_embedding")
        for c in getattr(cls, "__mro__", ())
    )


def draft_heads(drafter: Any) -> tuple[tuple[str, Any], ...]:
    """Every reference to a head in the drafter, by path: vLLM's MTP layers may each hold one
    (``shared_head.head``) besides ``lm_head``, and all of them must be what serves."""
    walk = getattr(drafter, "named_modules", None)
    if not callable(walk):
        head = getattr(drafter, "lm_head", None)
        return (("lm_head", head),) if head is not None else ()
    found = [(path, module) for path, module in walk(remove_duplicate=False) if is_head(module)]
    # lm_head first: it is what the drafter's own compute_logits names.
    return tuple(sorted(found, key=lambda item: (item[0] != "lm_head", item[0])))


def resolve(drafter: Any, target_model: Any) -> Modules:
    """The modules of a drafter and its target as vLLM lays them out for every family here:
    ``drafter.model.embed_tokens``, the target language model's ``model.embed_tokens`` and
    ``lm_head``."""
    target = language_model(target_model) if target_model is not None else None
    draft_body = present_or(getattr(drafter, "model", None), drafter)
    target_body = present_or(getattr(target, "model", None), target)
    return Modules(
        drafter=drafter,
        target=target,
        draft_heads=draft_heads(drafter),
        draft_embed=getattr(draft_body, "embed_tokens", None),
        target_embed=getattr(target_body, "embed_tokens", None),
        target_head=getattr(target, "lm_head", None),
    )


def _read(c: Any, key: str) -> Any:
    return c.get(key) if isinstance(c, Mapping) else getattr(c, key, None)


def top_value(config: Any, name: str, default: Any = None) -> Any:
    """A field of the config itself (not of its text config), from a dict or an object."""
    value = _read(config, name)
    return default if value is None else value


# BART-family configs (Nemotron Parse's MBart decoder) name the model's width d_model.
_ALIASES = {"hidden_size": ("d_model",)}


def config_value(config: Any, name: str, default: Any = None) -> Any:
    """A config field from a dict (``check``) or a config object (the engine), text config
    first (where a multimodal or assistant config keeps the language model's dimensions), then
    an encoder-decoder config's decoder (where Nemotron Parse keeps them)."""
    read = _read
    text = read(config, "text_config")
    decoder = read(config, "decoder") if read(config, "is_encoder_decoder") else None
    for source in (text, decoder, config):
        if source is None:
            continue
        for key in (name, *_ALIASES.get(name, ())):
            value = read(source, key)
            if value is not None:
                return value
    return default


@dataclass(frozen=True)
class Family:
    """One drafter family. Adding a family is one module in this package defining ``FAMILY``."""

    name: str  # short and lower-case: what `tiny-models --family` and receipts call it
    title: str  # for people: the model family and the kind of drafter
    # vLLM's drafter architecture(s) this family serves, each with the vLLM class it wraps.
    drafters: Mapping[str, str]
    speculative_method: str  # vLLM's speculative_config "method"
    # What `check` reads: the folder whose config names the family, its model types and its
    # Hugging Face architectures.
    config_from: str
    model_types: tuple[str, ...]
    hf_architectures: tuple[str, ...]
    head: HeadSource
    # The module name whose registration on the drafter is vLLM's share, the capture point.
    share: str
    tiny: str  # module of its tiny checkpoint builder (draft_head_fp8.tiny.<name>)
    # The policy's family inputs, from the draft config: ordered_embeddings, tie_word_embeddings.
    policy_inputs: Callable[[Any], dict[str, Any]]
    target_model_types: tuple[str, ...] = ()
    # What vLLM 0.32 needs to run this family on a CPU (e.g. no prefix caching: its mamba
    # "align" mode calls a Triton kernel), passed to LLM(...) by the harness.
    cpu_engine_options: Mapping[str, Any] = field(default_factory=dict)
    # A family the flag refuses at construction, with this reason (from the draft config).
    refusal: Callable[[Any], str | None] | None = None
    # Whether a checkpoint folder (its config, headers) is this family's drafter, beyond its
    # architectures: e.g. an EAGLE draft is a Llama config whose weights hold ``fc``.
    recognise: Callable[[Any, Path], bool] | None = None
    # Where the drafter's layers ship inside the target's checkpoint (MTP): from the target's
    # config, the tensor-name prefixes that are the draft's body, read per draft token.
    draft_prefixes: Callable[[Any], tuple[str, ...]] | None = None
    # What `check` can already tell will refuse start-up, from configs and headers:
    # (draft config, draft folder, target description or None) -> reasons.
    problems: Callable[[Any, Path, Any], list[str]] | None = None
    # The instance seam (``vllm_plugin.seams``) that holds the token ids vLLM's drafter masks out
    # of its logits, which the exact pick must never choose; None where it masks none.
    suppressed_tokens: str | None = None
    # How many of the head's first tokens the drafter may draft, from the draft's config, where
    # vLLM's drafter sets the logits of every token past them to -inf after the head (a vocabulary
    # suffix: Nemotron 3.5 Transcribe's ``speechlm_output_vocab_size``). The exact pick is made
    # over the tokens before it only (``masked_tokens``); None where no suffix is masked.
    drafted_vocab: Callable[[Any], int | None] | None = None
    # Where the family's drafts differ in whose head they read (EAGLE-3: a head of its own, or
    # none and the target's), which one a draft folder's checkpoint reads; else always ``head``.
    head_for: Callable[[Path], HeadSource] | None = None
    # Why vLLM's own weight-transfer session of this family's draft model cannot run in place
    # (the flag refuses it before a byte moves, with this reason); None where it can.
    draft_updates_refused: str | None = None
    # The term vLLM's drafter adds to the head's logits before it picks (``MARKOV_TERM``: DSpark's
    # Markov bias): the head then serves plain FP8 logits and the exact pick is made after the
    # term, where vLLM adds it (``vllm_plugin/markov_pick.py``); None where the head's argmax is
    # the draft token.
    term: str | None = None
    # Whether vLLM drafts a whole block per step from one head call, its rows ordered (request,
    # position) (DFlash): the probe then counts the agreement of each position of the block.
    drafts_block: bool = False
    # How many of the head's best tokens vLLM's drafter reads (``torch.topk``), from the draft's
    # config: DFlash2's candidate selector. The head then hands it exact top-K rows
    # (``top_k_rows``); None where it reads the argmax, or where the term's mixin decides.
    top_k: Callable[[Any], int | None] | None = None
    # Where the drafter keeps a head of its own in each draft layer and picks one per draft step
    # (Step3p5MTP: ``model.layers[N].shared_head.head``, spec step i the (i mod n)-th): from the
    # draft's config, every such head as (its module path in the drafter, its checkpoint tensor),
    # in draft-step order. Each is quantized, certified against its own rows and proven alone;
    # None where every head reference is one head.
    layer_heads: Callable[[Any], tuple[tuple[str, str], ...]] | None = None
    # The most draft tokens per step vLLM lets this family's checkpoints draft, where it refuses
    # more (Nemotron Parse 3.5: one trained MTP step); None where it allows any number.
    speculative_tokens: int | None = None

    @property
    def shares_target_head(self) -> bool:
        """Whether this family's drafts read the target's head (by default: ``head``)."""
        return self.head.when == AT_SHARE

    def head_policy_inputs(self, config: Any, head: HeadSource) -> dict[str, Any]:
        """The policy's family inputs for ``head``: a head tensor of the drafter's own (EAGLE-3's
        ``lm_head``) is neither the target's nor tied to an embedding."""
        inputs = self.policy_inputs(config)
        if self.layer_heads is not None:  # heads of its own that vLLM never shares
            return {**inputs, "shared_target_head": False, "layer_heads": True}
        if head.when == AT_LOAD and not head.tied_to_draft_embedding:
            inputs = {**inputs, "shared_target_head": False, "own_head": True}
        return inputs

    def masked_tokens(self, config: Any, vocab: int) -> range:
        """The token ids, of a head of ``vocab`` real tokens, that vLLM's drafter masks to -inf
        after the head (``drafted_vocab``): never a candidate of the exact pick."""
        drafted = None if self.drafted_vocab is None else self.drafted_vocab(config)
        return range(vocab if drafted is None else min(int(drafted), vocab), vocab)

    def heads_in(self, config: Any, head: HeadSource) -> tuple[tuple[str, HeadSource], ...]:
        """Every head the drafter serves, by module path, each with where its bytes come from:
        one per draft layer (``layer_heads``), else ``head`` at ``lm_head``."""
        if self.layer_heads is None:
            return (("lm_head", head),)
        return tuple((path, replace(head, tensor=t)) for path, t in self.layer_heads(config))

    def head_in(self, draft_folder: str | Path | None) -> HeadSource:
        """The head the draft in ``draft_folder`` reads (``head`` without a folder to look at)."""
        if self.head_for is None or draft_folder is None:
            return self.head
        return self.head_for(Path(draft_folder))

    def draft_heads(self, drafter: Any) -> tuple[tuple[str, Any], ...]:
        """Every reference to the draft head (``draft_heads``); the head a term is computed
        through (DSpark's ``markov_w2``) is not one."""
        term_head = TERM_HEADS.get(self.term) if self.term else None
        return tuple(item for item in draft_heads(drafter) if item[0] != term_head)

    def resolve(self, drafter: Any, target_model: Any) -> Modules:
        modules = resolve(drafter, target_model)
        if self.term is None:
            return modules
        return replace(modules, draft_heads=self.draft_heads(drafter))

    def is_drafter(self, config: Any, folder: Path | None) -> bool:
        architectures = config_value(config, "architectures") or []
        named = any(a in self.hf_architectures for a in architectures) or (
            config_value(config, "model_type") in self.model_types
        )
        if not named:
            return False
        return self.recognise is None or folder is None or self.recognise(config, folder)

    def check_problems(self, config: Any, folder: Path, target: Any) -> list[str]:
        return [] if self.problems is None else self.problems(config, folder, target)
