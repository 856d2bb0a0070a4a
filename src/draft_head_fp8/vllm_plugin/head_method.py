"""The FP8 head method: a vLLM quant method for the draft's ``ParallelLMHead`` only.

It is vLLM's online per-tensor FP8 scheme (scale = amax / 448, weight float8_e4m3fn, matmul
through one of vLLM's own FP8 kernels) with the differences the draft head needs:

- the head keeps its tie to the draft embedding until loading is done, because vLLM never loads
  ``lm_head.weight`` for this drafter: the embedding's bytes are the head's only source;
- quantization is pure torch and bounded in memory, so it runs on the CPU wheel (whose
  ``scaled_fp8_quant`` ops are placeholders) and on CUDA alike;
- the FP8 weight is a new, private Parameter: the BF16 tensor it was made from, which becomes the
  target's embedding after sharing, is never written;
- with tensor parallelism every rank quantizes its own shard with the whole head's amax (one
  all-reduce), so every rank computes exactly what TP 1 computes;
- the draft token is exact: the FP8 scan's top-k are rescored from the BF16 rows (``rescore``),
  which stay resident for that, read and never written;
- where the FP8 head is slower than those BF16 rows for a call's batch size, the rows serve it
  through vLLM's own unquantized GEMM (``batch_paths``): the same draft token, sooner.

Its bytes exist at load for a head tied to its own embedding (``process_weights_after_loading``),
or only at vLLM's share for a drafter that reads the target's head (``make_from``): the family
says which (``families``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.nn import Parameter

from draft_head_fp8.errors import HeadFp8EligibilityError
from draft_head_fp8.evidence.diagnostics import head_record
from draft_head_fp8.fp8 import QuantizedHead
from draft_head_fp8.layouts import LAYOUT_PLAIN
from draft_head_fp8.rescore import rescore_top_k
from draft_head_fp8.settings import BF16_FROM_NEVER
from draft_head_fp8.vllm_plugin import batch_paths, certified_pick, head_bytes, seams
from draft_head_fp8.vllm_plugin.fused_kernel import FusedW8A16HeadKernel
from draft_head_fp8.vllm_plugin.kernels import KernelChoice, choose_head_kernel
from draft_head_fp8.vllm_plugin.refusal import announce_refusal

# vLLM's names, where the seams table says this release keeps them.
QuantizeMethodBase = seams.read("quantize_method_base")
Fp8PerTensorOnlineLinearMethod = seams.read("fp8_online_linear_method")
kFp8StaticTensorSym = seams.read("fp8_static_tensor_key")
FP8ScaledMMLinearLayerConfig = seams.read("fp8_scaled_mm_layer_config")
init_fp8_linear_kernel = seams.read("init_fp8_linear_kernel")
get_current_vllm_config = seams.read("current_vllm_config")


def picks_after_term(plan: Any, fused: bool) -> bool:
    """Whether the drafter adds a term to the head's logits before it picks (its family says):
    the head then serves plain FP8 logits. The fused kernel picks inside the head: refused."""
    after = getattr(plan.family, "term", None) is not None
    if after and fused:
        raise HeadFp8EligibilityError(
            "the fused kernel makes the pick inside the head, and this drafter adds a term to the "
            "head's logits before it picks: serve it with DRAFT_HEAD_FP8_KERNEL=vllm"
        )
    return after


def serves_top_k(plan: Any, fused: bool) -> int | None:
    """How many of the head's best tokens the drafter reads (its family says, from its config),
    each handed exact (``top_k_rows``); only a certified head can prove them."""
    top = plan.top_k
    if top is None:
        return None
    if fused or not plan.certify or plan.rescore_k == 0:
        raise HeadFp8EligibilityError(
            f"this drafter reads the head's top-{top}, which is served exactly only by the "
            "certified pick over vLLM's FP8 kernel: serve it with DRAFT_HEAD_FP8_KERNEL=vllm and "
            "the certificate on, or with the flag unset"
        )
    return int(top)


class DraftHeadFp8LinearMethod(QuantizeMethodBase):
    """Per-tensor FP8 for the draft LM head. Reports itself under its own name in receipts."""

    # Same activation quantization as vLLM's online per-tensor method, so the same kernel is chosen.
    activation_quant_key = Fp8PerTensorOnlineLinearMethod.activation_quant_key
    weight_quant_key = kFp8StaticTensorSym

    def __init__(
        self, *, input_dtype: torch.dtype | None = None, out_dtype: torch.dtype | None = None
    ) -> None:
        # The serving dtype, from the vLLM config being built (given directly in unit tests).
        self.input_dtype = input_dtype or get_current_vllm_config().model_config.dtype
        self.out_dtype = out_dtype or torch.get_default_dtype()
        self.fp8_linear: Any = None
        self.kernel: KernelChoice | None = None
        self.weight_layout = LAYOUT_PLAIN
        # Where the head's bytes must come from; set by the drafter before loading.
        self.checkpoint_source: Any = None  # callable -> {"sha256", "file", "tensor", ...}
        self.checkpoint_owner = "assistant"  # whose checkpoint that is, for the refusal
        self.real_rows: int | None = None  # rows of this shard that are tokens, not padding
        self.rescore_k = 0
        self.rescore_rows: torch.Tensor | None = None  # the BF16 rows, while rescore_k > 0
        self.source_rows: torch.Tensor | None = None  # the BF16 rows the FP8 copy was made from
        self.suppress_tokens: list[int] = []  # local rows the drafter masks to -inf
        self.suppressed: torch.Tensor | None = None
        self.stored_scale: torch.Tensor | None = None  # ours: a kernel may rewrite its own copy
        self.bf16_setting: str | int = BF16_FROM_NEVER
        self.bf16_from: int | None = None  # calls of this many rows or more: the BF16 rows
        self.bf16: batch_paths.BF16Head | None = None
        self.bf16_layer: torch.nn.Module | None = None  # the target's head, where rows are its
        self.diagnostics: dict[str, Any] = {}
        # Set once the head is proven (``updates.Watch``): asked before every draft-head call
        # whether the bytes it describes are still the ones the head reads.
        self.watch: Any = None
        self.fallback_reason: str | None = None  # why the BF16 rows serve every call, if they do
        # The certified pick (certificate.py): asked for, its bound once the head is made, and
        # how many draft rows each stage has decided (on the device; read off the hot path).
        self.certify = False
        self.bound: Any = None  # certificate.LogitBound
        self.bound_facts: dict | None = None  # what the diagnostics say of it
        self.pick_counts: torch.Tensor | None = None
        self.target_head: torch.nn.Module | None = None  # the target's head, for a shared head
        # A drafter that adds a term to the logits before it picks (DSpark): the head serves
        # plain FP8 logits, and the drafter makes the certified pick after the term.
        self.picks_after_term = False
        # A drafter that reads the head's top-K (DFlash2's candidate selector): how many.
        self.top_k: int | None = None

    def install(
        self,
        head: torch.nn.Module,
        plan: Any,
        *,
        checkpoint: Any,
        checkpoint_owner: str = "assistant",
        suppress_tokens: list[int] | None = None,
        serving_dtype: torch.dtype | None = None,
    ) -> None:
        """Take over a constructed, tied ``ParallelLMHead`` as the ``plan`` says (``plan.py``):
        choose the FP8 kernel and the pick for this rank's shape (``kernels``), how many candidates
        to rescore, and whether each pick is certified; ``checkpoint``
        (``head_bytes.checkpoint_of``) is what the bytes must match, the ``checkpoint_owner``'s.

        The weight stays the tied BF16 embedding Parameter until ``process_weights_after_loading``
        (or ``make_from``, for a head whose bytes exist only at the share)."""
        if serving_dtype is not None:
            self.input_dtype = self.out_dtype = serving_dtype
        self.checkpoint_source, self.checkpoint_owner = checkpoint, checkpoint_owner
        shape = tuple(head.weight.shape)  # [this rank's rows, hidden]
        config = FP8ScaledMMLinearLayerConfig(
            weight_quant_key=self.weight_quant_key,
            activation_quant_key=self.activation_quant_key,
            input_dtype=self.input_dtype,
            out_dtype=self.out_dtype,
            weight_shape=shape,
        )
        rescore_k = plan.rescore_k
        self.kernel = choose_head_kernel(
            config, cpu_kernel=plan.cpu_kernel, head_kernel=plan.head_kernel,
            certify=plan.certify, rescore_k=rescore_k,
        )  # fmt: skip
        self.weight_layout = self.kernel.layout
        # The fused kernel is this package's own, not one of vLLM's: nothing of vLLM's to make.
        fused = self.kernel.kernel is FusedW8A16HeadKernel
        self.fp8_linear = (
            FusedW8A16HeadKernel()
            if fused
            else init_fp8_linear_kernel(
                activation_quant_key=self.activation_quant_key,
                weight_quant_key=self.weight_quant_key,
                weight_shape=shape,
                input_dtype=self.input_dtype,
                out_dtype=self.out_dtype,
                force_kernel=self.kernel.kernel,
                module_name=type(self).__name__,
            )
        )
        indices = head.shard_indices
        self.real_rows = int(indices.num_org_elements)
        self.rescore_k = min(rescore_k, shape[0])
        self.certify = plan.certify and self.rescore_k > 0
        self.bf16_setting = plan.bf16_from
        start, end = indices.org_vocab_start_index, indices.org_vocab_end_index
        self.suppress_tokens = [t - start for t in suppress_tokens or () if start <= t < end]
        self.picks_after_term = picks_after_term(plan, fused)
        self.top_k = serves_top_k(plan, fused)
        head.quant_method = self

    def create_weights(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "DraftHeadFp8LinearMethod is installed on an existing tied head (install()), "
            "not used to create one"
        )

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """A head whose bytes exist at load: made from its own (tied) weight, kept as the rows."""
        if getattr(layer, "_draft_head_fp8_done", False):
            return
        try:
            self._make(layer, layer.weight, in_place=False)
        except Exception as exc:
            announce_refusal(exc)
            raise

    def make_from(self, layer: torch.nn.Module, target_head: torch.nn.Module) -> None:
        """A head whose bytes exist only at the share: made from the target head's BF16 weight,
        which stays the target's (read, never written) and is the exact pick's rows; the target
        head itself serves the BF16 path, so no BF16 copy is added."""
        self.target_head = self.bf16_layer = target_head
        self._make(layer, target_head.weight, in_place=False)

    def remake(
        self, layer: torch.nn.Module, source: torch.Tensor, checkpoint_source: Any = None
    ) -> None:
        """After a weight update: the FP8 copy made again from ``source`` as it now is, by the
        path that made it at start-up, written in place. ``checkpoint_source``: the checkpoint
        the update named (``head_bytes.checkpoint_of``), else None (weights that came with the
        update).
        Raises ``HeadFp8EligibilityError`` (or ``NonFiniteHeadError``) and changes nothing the
        head serves when the new bytes cannot be served in FP8; the caller then serves the BF16
        rows (``serve_bf16_rows``)."""
        self.checkpoint_source = checkpoint_source
        self._make(layer, source, in_place=True)

    def serve_bf16_rows(self, layer: torch.nn.Module, source: torch.Tensor, reason: str) -> None:
        """Every draft-head call from now on served by the head's own BF16 rows (``source``),
        vLLM's unquantized GEMM: the BF16 head's logits, so the BF16 head's draft tokens, with
        no FP8 byte read. For a head whose FP8 copy no longer describes the rows it serves."""
        self.bf16 = batch_paths.BF16Head(source, self.bf16_layer)
        self.bf16_from = 1
        self.fallback_reason = reason
        self.diagnostics = {
            **self.diagnostics,
            "batch_paths": {**(self.diagnostics.get("batch_paths") or {}), "bf16_from": 1,
                            "why": f"the FP8 head was refused after a weight update: {reason}"},
        }  # fmt: skip

    @torch.no_grad()
    def _make(self, layer: torch.nn.Module, source: torch.Tensor, *, in_place: bool) -> None:
        """The one way the head's FP8 state is made, at start-up and after every weight update:
        hash ``source`` (this rank's BF16 rows) against the checkpoint, quantize with the whole
        head's scale, make the certificate's bound, hand the bytes to the kernel (a new Parameter
        at start-up; ``in_place``: written into the ones installed, so CUDA graphs captured on
        them keep reading valid bytes), choose the batch paths, and record it all."""
        if source.device.type == "meta":
            raise HeadFp8EligibilityError(
                "draft head weight was never loaded (still on the meta device): refusing to "
                "quantize uninitialised memory"
            )
        started = time.perf_counter()
        real = self.real_rows
        if real is None:  # not installed on a sharded head: all its real rows
            real = int(getattr(layer, "org_vocab_size", source.shape[0]))
        made = head_bytes.hash_and_quantize(layer, source, real, self.checkpoint_source)
        head_bytes.check_checkpoint(made, self.checkpoint_owner)
        # The bound reads the FP8 bytes row-major: made before vLLM packs them (its packing may
        # rewrite the same storage in VNNI tiles).
        bound, facts = certified_pick.make_bound(self, source, made.quantized)
        if in_place:
            self._write_in_place(layer, made.quantized)
        else:
            self._install(layer, made.quantized)
        self.bound, self.bound_facts = bound, facts
        if bound is not None and self.pick_counts is None:  # kept across weight updates: per boot
            self.pick_counts = certified_pick.new_counts(source.device)
        # The kernel may rewrite layer.weight_scale in place: the scale made is kept apart.
        self.stored_scale = made.quantized.scale
        # The BF16 tensor the copy was made from, whatever k: a later proof re-makes from it,
        # and (k > 0) the exact pick reads these rows, just hashed against the checkpoint.
        self.source_rows = source
        self.rescore_rows = source if self.rescore_k else None
        if self.rescore_k and self.suppress_tokens:
            self.suppressed = torch.tensor(self.suppress_tokens, device=source.device)
        # The BF16 rows' GEMM is prepared from the rows as they now are (oneDNN keeps a
        # reordered copy of its own); the target's own head is vLLM's to redo.
        paths = self._choose_paths(layer, source, self.bf16_layer)
        self.fallback_reason = None
        layer._draft_head_fp8_done = True
        self.diagnostics = head_record(
            source=source,
            rows_hashed=real,
            source_sha256=made.source_sha256,
            checkpoint=made.checkpoint,
            quantized=made.quantized,
            kernel=type(self.fp8_linear).__name__,
            vllm_default_kernel=self.kernel.vllm_default if self.kernel else None,
            seconds={
                "hash_source": made.hashed - started,
                "quantize": made.quantized_at - made.hashed,
                "total_with_checkpoint_hash": time.perf_counter() - started,
            },
            weight_layout=self.weight_layout,
            kernel_warning=self.kernel.warning if self.kernel else None,
            amax_local=made.amax_local,
            batch_paths=paths,
        )

    def _install(self, layer: torch.nn.Module, quantized: QuantizedHead) -> None:
        # A new Parameter, never a copy into the old one: the BF16 source is the draft embedding
        # (which the proposer is about to replace by the target's) or the target's own head, and
        # its bytes stay as loaded. The kernel reads layer.weight_scale and may rewrite it in
        # place (vLLM's replace_parameter reuses storage of the same size): a clone.
        layer.weight = Parameter(quantized.weight.t(), requires_grad=False)
        layer.weight_scale = Parameter(quantized.scale.clone(), requires_grad=False)
        layer.input_scale = None
        self.fp8_linear.process_weights_after_loading(layer)

    def _write_in_place(self, layer: torch.nn.Module, quantized: QuantizedHead) -> None:
        # vLLM's packing on a scratch module, as at load, then every tensor checked before any
        # is written: a head is never left half re-made.
        scratch = torch.nn.Module()
        self._install(scratch, quantized)
        for name in ("weight", "weight_scale"):
            mine, new = getattr(layer, name), getattr(scratch, name)
            if mine.shape != new.shape or mine.dtype != new.dtype:
                raise HeadFp8EligibilityError(
                    f"the re-made FP8 head's {name} is {new.dtype} {list(new.shape)}, not the "
                    f"{mine.dtype} {list(mine.shape)} the engine serves"
                )
        for name in ("weight", "weight_scale"):
            getattr(layer, name).copy_(getattr(scratch, name))

    @property
    def certified(self) -> bool:
        """Whether each pick is certified (the bound is made once the head's bytes are)."""
        return self.certify

    def certificate_record(self) -> dict:
        """The certificate's facts and its counts so far (reads the device: off the hot path)."""
        return certified_pick.record(self)

    def _choose_paths(
        self, layer: torch.nn.Module, source: torch.Tensor, bf16_layer: torch.nn.Module | None
    ) -> dict:
        if self.rescore_rows is None:
            # Plain FP8 logits keep no BF16 rows: there is no other path to choose.
            self.bf16_from, self.bf16 = None, None
            return {"setting": BF16_FROM_NEVER, "device": source.device.type, "measured": None,
                    "bf16_from": None, "why": "plain FP8 logits keep no BF16 rows"}  # fmt: skip
        counted = None if self.pick_counts is None else self.pick_counts.clone()
        self.bf16_from, self.bf16, record = batch_paths.choose(
            self.bf16_setting,
            device=source.device,
            fp8=lambda x: self._fp8_logits(layer, x),
            bf16=lambda: batch_paths.BF16Head(source, bf16_layer),
            hidden=int(source.shape[1]),
            dtype=source.dtype,
        )
        if counted is not None:
            self.pick_counts.copy_(counted)  # the measurement's calls are no draft rows
        return record

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        # Host-side facts only (a counter, an identity): no device sync, no value read. Under a
        # CUDA graph's replay this does not run: updates the engine announces are proven where
        # they end (``updates``), outside any graph.
        if self.watch is not None:
            self.watch.before_draft_call()
        # A Python branch on the batch, never on values: each CUDA graph or compiled size takes
        # one path, and nothing waits for the device.
        if self.serves_bf16_rows(x):
            return self.bf16(x, bias)
        return self._fp8_logits(layer, x, bias)

    def serves_bf16_rows(self, x: torch.Tensor) -> bool:
        """Whether a call on ``x`` is served by the BF16 rows (exact logits), not the FP8 head."""
        return self.bf16 is not None and x.numel() // x.shape[-1] >= self.bf16_from

    def _fp8_logits(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if isinstance(self.fp8_linear, FusedW8A16HeadKernel):  # the scan and the pick in one
            return self.fp8_linear.pick(self, layer, x)
        logits = self.fp8_linear.apply_weights(layer, x, bias)
        if self.rescore_rows is None or self.picks_after_term:
            return logits
        if self.top_k is not None:
            return certified_pick.top_k(self, logits, x, self.top_k)
        if self.bound is not None:
            return certified_pick.pick(self, logits, x)
        return rescore_top_k(
            logits,
            x,
            self.rescore_rows,
            k=self.rescore_k,
            valid_rows=self.real_rows,
            suppressed=self.suppressed,
        )

    def embedding(self, layer: torch.nn.Module, input_: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the FP8 draft head is an LM head, not an input embedding")
