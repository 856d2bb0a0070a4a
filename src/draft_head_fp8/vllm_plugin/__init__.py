"""vLLM integration. ``register`` is the ``vllm.general_plugins`` entry point; vLLM calls it in
every process it starts (API server, engine core, workers).

With the experiment flag unset it returns before importing anything: vLLM behaves byte for byte
as if this package were not installed.
"""

from __future__ import annotations

from draft_head_fp8.policy import env_enabled

DRAFTER = "draft_head_fp8.vllm_plugin.drafter:DraftHeadFp8Gemma4MTP"
_registered = False


def register() -> None:
    global _registered
    if _registered or not env_enabled():
        return
    from vllm import ModelRegistry

    from draft_head_fp8.vllm_plugin import post_share

    # The target is built before the drafter, so the watch for its lm_head must be on first.
    post_share.install_hook()
    ModelRegistry.register_model("Gemma4MTPModel", DRAFTER)
    _registered = True
