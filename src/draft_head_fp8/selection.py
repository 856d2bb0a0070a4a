"""``select_draft_head_method``, the public name (docs/contract.md, "Policy", module
``selection``): the policy's decision turned into a head method. It is defined beside the method it
makes by default, in ``vllm_plugin.selection``, so that the plugin, which calls it for every draft
head, never imports back up from here. Importing it loads neither torch nor vLLM.
"""

from draft_head_fp8.vllm_plugin.selection import select_draft_head_method

__all__ = ["select_draft_head_method"]
