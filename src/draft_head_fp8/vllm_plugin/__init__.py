"""vLLM integration. ``register`` is the ``vllm.general_plugins`` entry point; vLLM calls it in
every process it starts (API server, engine core, workers).

With the experiment flag unset it returns before importing anything: vLLM behaves byte for byte
as if this package were not installed. With it set, every drafter architecture of every family
(``draft_head_fp8.families``) is served by this package's class for it, and every other drafter
architecture vLLM knows by a class that refuses to start (``unserved``), named lazily: no vLLM
model file is imported until vLLM builds that drafter. Each wraps the class the installed vLLM's
registry resolves the architecture to (``vllm_classes``), or refuses it when it is not the class
its family was written for.
"""

from __future__ import annotations

from draft_head_fp8.policy import env_enabled

_registered = False
DRAFTERS = "draft_head_fp8.vllm_plugin.drafter"
CLASS_PREFIX = "DraftHeadFp8"


def registry_entry(vllm_class: str) -> str:
    """What vLLM's registry is given for a drafter: where this package's class for vLLM's
    ``module:Class`` is, named so that only building that drafter imports anything."""
    return f"{DRAFTERS}:{CLASS_PREFIX}{vllm_class.rsplit(':', 1)[-1]}"


def register() -> None:
    global _registered
    if _registered or not env_enabled():
        return
    from draft_head_fp8.families import all_families
    from draft_head_fp8.vllm_plugin import post_share, seams, shutdown_grace, unserved, vllm_classes

    ModelRegistry = seams.read("model_registry")

    # The target is built before the drafter, so the watch for its lm_head must be on first.
    post_share.install_hook()
    # An ordinary stop must not kill the engine core before its workers keep the boot's last
    # record (shutdown_grace says why vLLM's default does).
    shutdown_grace.install()
    known = set(ModelRegistry.models)
    for family in all_families():
        for architecture, vllm_class in family.drafters.items():
            if architecture not in known:  # a later release's name (0.34's Ricursive DFlash2)
                continue
            # vLLM's own entry is kept: the class it resolves to is the one wrapped (or refused).
            vllm_classes.remember(architecture)
            ModelRegistry.register_model(architecture, registry_entry(vllm_class))
    # Every other drafter vLLM knows refuses to start: the flag would otherwise be ignored.
    for architecture in unserved.architectures():
        vllm_classes.remember(architecture)
        ModelRegistry.register_model(architecture, unserved.registry_entry(architecture))
    _registered = True
