"""draft-head-fp8: serve only the speculative draft model's LM head in FP8 inside vLLM, prove at
start-up that exactly that happened, and keep every boot's proof in a write-once archive.

Importing the package loads neither torch nor vLLM: the policy and receipt tooling run anywhere.
"""

from draft_head_fp8.evidence.checks import validate_post_share_receipt
from draft_head_fp8.evidence.receipt import make_runtime_receipt, write_runtime_receipt
from draft_head_fp8.policy import (
    EXPECTED_METHOD,
    EXPECTED_ONLINE_SPEC,
    EXPERIMENT_ENV,
    Eligibility,
    HeadFp8EligibilityError,
    eligibility,
    env_enabled,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # select_draft_head_method lives beside the head method it makes (vllm_plugin.selection), so
    # it loads on first use: vLLM imports this package for the plugin's entry point in every
    # process, and with the flag off no plugin module may load.
    if name == "select_draft_head_method":
        from draft_head_fp8.selection import select_draft_head_method

        return select_draft_head_method
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EXPERIMENT_ENV",
    "EXPECTED_ONLINE_SPEC",
    "EXPECTED_METHOD",
    "HeadFp8EligibilityError",
    "Eligibility",
    "env_enabled",
    "eligibility",
    "select_draft_head_method",
    "make_runtime_receipt",
    "validate_post_share_receipt",
    "write_runtime_receipt",
]
