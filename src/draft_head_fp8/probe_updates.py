"""Inside one engine process: weight updates the way a trainer or an RL framework makes them, each
followed by the same prompts, for ``probe`` (``--weight-updates FILE``). Every kind vLLM offers:

- ``reload_weights``: vLLM's own, from a folder (``weights_path``) or the model's own;
- ``transfer``: a weight-transfer session of the target or the draft (``start_weight_update`` or
  ``start_draft_weight_update``, ``update_weights``, ``finish_weight_update``), through whichever
  engine ``weight_transfer_config`` names (the tests' file engine: tests/shims/weight_transfer);
- ``load_weights``: the model's own ``load_weights`` called in each worker through
  ``collective_rpc``, with nothing announced (what older RL integrations do);
- ``sleep``: ``sleep(level)`` then ``wake_up()``.

Each step records whether vLLM raised, what was generated after it, vLLM's counters, every
draft-head call's pick against the BF16 head of the step's ``reference`` folders (the head the
engine should hold after the update, read from disk), and what the workers serve then.
"""

from __future__ import annotations

from typing import Any


def _update(llm: Any, step: dict) -> None:
    kind = step["kind"]
    if kind == "reload_weights":
        llm.collective_rpc("reload_weights", kwargs={"weights_path": step.get("weights_path")})
    elif kind == "transfer":
        start = "start_draft_weight_update" if step["model"] == "draft" else "start_weight_update"
        llm.collective_rpc(start)
        try:
            update = {"path": step["file"], "names": step.get("names") or []}
            llm.collective_rpc("update_weights", args=(update,))
        finally:
            llm.collective_rpc("finish_weight_update")
    elif kind == "load_weights":
        llm.collective_rpc(
            "probe_load_weights", args=(step["model"], step["file"], step.get("names") or [])
        )
    elif kind == "sleep":
        llm.sleep(level=step.get("level", 1))
        llm.wake_up()
    else:
        raise ValueError(f"unknown weight update {kind!r}")


def run_steps(
    llm: Any, steps: list[dict], inputs: list, params: Any, agreement: bool, metrics: Any
) -> list:
    """Each update of ``steps`` in turn, then the prompts (``inputs``) again; the facts of each
    (``metrics``: the probe's reading of vLLM's counters)."""
    if any(step["kind"] == "transfer" for step in steps):
        llm.collective_rpc("init_weight_transfer_engine", args=({},))
    facts = []
    for step in steps:
        try:
            _update(llm, step)
            error = None
        except Exception as exc:  # what vLLM hands back from the workers
            error = f"{type(exc).__name__}: {exc}"
        reference = step.get("reference")
        if agreement and reference:
            llm.collective_rpc(
                "probe_watch_draft_agreement", args=(reference["target"], reference["assistant"])
            )
        outputs = llm.generate(inputs, params, use_tqdm=False)
        facts.append({
            "step": step,
            "error": error,
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
            "texts": [o.outputs[0].text for o in outputs],
            "spec_decode": metrics(llm),
            "draft_agreement": llm.collective_rpc("probe_read_draft_agreement")[0]
            if agreement and reference else None,
            "after": llm.collective_rpc("probe_observe"),
        })  # fmt: skip
    return facts
