"""Evidence: what a boot proves about the draft head, in the words of docs/contract.md.

- ``snapshot``: metadata of one tensor (dtype, shape, finiteness), never its values;
- ``receipt``: the runtime receipt, captured from live modules, and its write-once file;
- ``checks``: the post-share checks, one table per receipt version, serving gate and report;
- ``verdict``: schema + checks, the one answer to "is this file a valid receipt?";
- ``diagnostics``: the record archived beside each receipt (provenance, scale, timings);
- ``encoding``: the one JSON encoding every evidence file is written in.

The names below are the vocabulary shared by the plugin, the archive readers and the commands.
Importing this package loads neither torch nor vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable

RECEIPT_V2 = "draft-head-fp8-runtime-receipt/v2"
RECEIPT_V3 = "draft-head-fp8-runtime-receipt/v3"
DIAGNOSTICS_V5 = "draft-head-fp8-diagnostics/v5"
POST_SHARE = "post_share"


def receipt_path(rank: int, phase: str = POST_SHARE) -> str:
    """Where a rank's receipt lives inside a boot."""
    return f"receipts/{phase}-rank{rank}.json"


def diagnostics_path(rank: int, phase: str = POST_SHARE) -> str:
    """Where a rank's diagnostics record lives inside a boot, beside its receipt."""
    return f"diagnostics/{phase}-rank{rank}.json"


# A tensor-parallel boot's cross-rank record, written once by rank 0.
RANKS_PATH = "diagnostics/ranks.json"


def boot_files(tp_size: int, ranks: Iterable[int] | None = None) -> list[str]:
    """Every file a boot of ``tp_size`` ranks must hold before it is sealed: of ``ranks`` only
    (default all) where the boot is one node's, the cross-rank record where rank 0 is among them."""
    ranks = list(range(tp_size) if ranks is None else ranks)
    files = [path(rank) for rank in ranks for path in (receipt_path, diagnostics_path)]
    return files + ([RANKS_PATH] if tp_size > 1 and 0 in ranks else [])
