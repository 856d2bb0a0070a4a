"""Old name of ``tools.vllm_standins``, kept only until tests/test_receipt.py imports the new
name (its receipts record the stand-ins' module name, so this is the same module, not a copy)."""

import sys

from tools import vllm_standins

sys.modules[__name__] = vllm_standins
