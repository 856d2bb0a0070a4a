"""Test-only: vLLM's ``reload_weights`` of a DeepSeek-V2/V3 (MLA) target failing partway through
the checkpoint, as it does on an AMX Xeon (flag off too). See ../README.md for what it stands for
and what it cannot show."""

from __future__ import annotations

# vLLM's message on the AMX Xeon (shared/reference/vllm-notes.md), and whose it is here.
MESSAGE = (
    "The size of tensor a (0) must match the size of tensor b (512) at non-singleton dimension 1 "
    "(tests/shims/failing_reload: AMX's MLA reload, stood in)"
)
# The first tensor the reload fails at: the MLA attention's, loaded after the head's rows.
FAILS_AT = "kv_b_proj"


def register() -> None:
    from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM

    loaded = DeepseekV2ForCausalLM.load_weights
    if getattr(loaded, "_draft_head_fp8_standin", False):
        return

    def load_weights(self, weights):
        if not getattr(self, "_draft_head_fp8_standin_loaded", False):
            self._draft_head_fp8_standin_loaded = True  # vLLM's first load: untouched
            return loaded(self, weights)

        def until_the_mla_tensor():
            for name, tensor in weights:
                if FAILS_AT in name:
                    raise RuntimeError(MESSAGE)
                yield name, tensor

        return loaded(self, until_the_mla_tensor())

    load_weights._draft_head_fp8_standin = True
    DeepseekV2ForCausalLM.load_weights = load_weights
