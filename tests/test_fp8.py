"""The torch mechanism (fp8.py): finiteness on raw FP8 bytes and in bounded pieces (checked for
peak memory in a fresh process), the positive-scalar test, per-tensor quantization, hashing."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from draft_head_fp8 import fp8  # noqa: E402
from draft_head_fp8.fp8 import (  # noqa: E402
    FP8_E4M3_MAX,
    NonFiniteHeadError,
    is_finite,
    is_positive_scalar,
    quantize_per_tensor,
    tensor_sha256,
)


def reference_finite(t):
    return bool(torch.isfinite(t.to(torch.float32)).all())


# ---------------------------------------------------------------- is_finite


def test_every_e4m3fn_byte():
    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for byte in range(256):
        t = raw[byte : byte + 1].view(torch.float8_e4m3fn)
        assert is_finite(t) is (byte not in (0x7F, 0xFF)), hex(byte)
        assert is_finite(t) is reference_finite(t)


def test_every_e5m2_byte():
    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for byte in range(256):
        t = raw[byte : byte + 1].view(torch.float8_e5m2)
        assert is_finite(t) is reference_finite(t), hex(byte)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (1,), (7,), (33, 17)])
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.float8_e4m3fn]
)
def test_clean_tensors_are_finite(shape, dtype):
    t = torch.randn(shape).clamp(-100, 100).to(dtype)
    assert is_finite(t) is True


def test_non_float_tensors_are_finite():
    assert is_finite(torch.arange(10)) is True
    assert is_finite(torch.tensor([True, False])) is True
    assert is_finite(torch.full((4,), 0xFF, dtype=torch.uint8)) is True  # bytes, not FP8


def test_complex():
    t = torch.randn(5, dtype=torch.complex64)
    assert is_finite(t) is True
    t[2] = complex(0, math.inf)
    assert is_finite(t) is False


@pytest.mark.parametrize(
    "layout", ["contiguous", "transposed", "strided", "sliced_rows", "expanded", "permuted3d"]
)
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2]
)
def test_layouts_against_reference(layout, dtype, monkeypatch):
    # Small chunks, so that every layout goes through several pieces.
    monkeypatch.setattr(fp8, "CHUNK_ELEMENTS", 97)
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(24, 40, generator=gen).clamp(-100, 100)

    def view(t):
        return {
            "contiguous": lambda: t,
            "transposed": lambda: t.t(),
            "strided": lambda: t[:, ::3],
            "sliced_rows": lambda: t[5:19],
            "expanded": lambda: t[:1].expand(6, 40),
            "permuted3d": lambda: t.reshape(4, 6, 40).permute(2, 0, 1),
        }[layout]()

    for position in range(0, 24 * 40, 37):
        storage = base.clone().to(dtype)
        target = view(storage)
        assert is_finite(target) is True
        flat = storage.view(-1)
        if dtype == torch.float8_e4m3fn:
            flat.view(torch.uint8)[position] = 0xFF if position % 2 else 0x7F
        else:
            flat[position] = math.nan if position % 2 else -math.inf
        assert is_finite(target) is reference_finite(target), (layout, position)


def test_last_chunk_is_checked(monkeypatch):
    monkeypatch.setattr(fp8, "CHUNK_ELEMENTS", 1000)
    t = torch.randn(10_007).to(torch.bfloat16)
    t[-1] = math.nan
    assert is_finite(t) is False
    nd = torch.randn(101, 103).to(torch.bfloat16)[:, ::2]  # not dense: row chunks
    assert is_finite(nd) is True
    nd[-1, -1] = math.inf
    assert is_finite(nd) is False


# --------------------------------------------------------------- bounded memory, in a fresh process

MEMORY_PROBE = textwrap.dedent(
    r"""
    import json, re, sys
    import torch
    from draft_head_fp8.fp8 import is_finite

    torch.set_num_threads(1)

    def status(key):
        with open("/proc/self/status") as f:
            return int(re.search(key + r":\s+(\d+) kB", f.read()).group(1)) * 1024

    def reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS

    n = 64 * 1024 * 1024
    side = 8192  # n == side * side
    # Build the inputs without large temporaries, and touch every page.
    fp8_bytes = torch.empty(n, dtype=torch.uint8)
    fp8_bytes.random_(0, 0x7F)  # 0x00..0x7E: finite e4m3fn values
    fp8_bytes[::3] |= 0x80  # some negatives (0x80..0xFE: finite too)
    fp8 = fp8_bytes.view(torch.float8_e4m3fn)
    bf16 = torch.empty(n, dtype=torch.bfloat16).normal_()

    cases = {
        "fp8_flat": fp8,
        "fp8_transposed": fp8.view(side, side).t(),  # the head's [hidden, vocab] layout
        "bf16_flat": bf16,
        "bf16_transposed": bf16.view(side, side).t(),
        "bf16_not_dense": bf16.view(side, side)[:, : side // 2],
    }
    out = {}
    for name, tensor in cases.items():
        for planted in (False, True):
            if planted:
                if tensor.dtype == torch.float8_e4m3fn:
                    fp8_bytes[n - 1] = 0xFF
                else:
                    tensor[(-1,) * tensor.dim()] = float("nan")  # its last element
            reset_peak()
            before = status("VmRSS")
            result = is_finite(tensor)
            extra = status("VmHWM") - before
            out[f"{name}/{planted}"] = {"result": result, "extra": extra, "numel": tensor.numel()}
            if planted:
                if tensor.dtype == torch.float8_e4m3fn:
                    fp8_bytes[n - 1] = 0x01
                else:
                    tensor[(-1,) * tensor.dim()] = 0.0
    print(json.dumps(out))
    """
)


def _clear_refs_works():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.skipif(
    not _clear_refs_works(), reason="VmHWM cannot be reset here (/proc/self/clear_refs)"
)
def test_finiteness_check_memory_is_bounded(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(MEMORY_PROBE)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, got in results.items():
        expect_finite = name.endswith("/False")
        assert got["result"] is expect_finite, (name, got)
        full_fp32_copy = got["numel"] * 4
        # Far below a float32 copy of the tensor (256 MiB here): at most a quarter of it.
        assert got["extra"] < full_fp32_copy / 4, (name, got["extra"] / 2**20)


# ---------------------------------------------------------------- is_positive_scalar


@pytest.mark.parametrize(
    "value, expected",
    [
        (torch.tensor([0.25]), True),
        (torch.tensor(3.0), True),
        (torch.tensor([[1e-38]]), True),
        (torch.tensor([0.0]), False),
        (torch.tensor([-0.0]), False),
        (torch.tensor([-2.0]), False),
        (torch.tensor([math.nan]), False),
        (torch.tensor([math.inf]), False),
        (torch.tensor([1.0, 1.0]), False),
        (torch.empty(0), False),
        (torch.tensor([2], dtype=torch.int64), True),
        (torch.tensor([0.5]).to(torch.float8_e4m3fn), True),
        (torch.tensor([0.5], dtype=torch.float64)[0:1].expand(1), True),
    ],
)
def test_is_positive_scalar(value, expected):
    assert is_positive_scalar(value) is expected


# ---------------------------------------------------------------- quantize_per_tensor


def test_quantize_per_tensor_values():
    gen = torch.Generator().manual_seed(0)
    w = (torch.randn(300, 64, generator=gen) * 0.05).to(torch.bfloat16)
    w[17, 3] = -0.9  # the amax, negative
    q = quantize_per_tensor(w)
    assert q.weight.dtype == torch.float8_e4m3fn
    assert list(q.weight.shape) == [300, 64] and q.weight.is_contiguous()
    assert q.scale.dtype == torch.float32 and list(q.scale.shape) == [1]
    amax = float(w.float().abs().max())
    assert q.amax == pytest.approx(amax)
    assert float(q.scale) == pytest.approx(amax / FP8_E4M3_MAX)
    assert float(q.weight[17, 3].float()) == -FP8_E4M3_MAX  # the amax maps to -448 exactly
    deq = q.weight.float() * q.scale
    rel = (deq - w.float()).abs().max() / amax
    assert rel < 2**-3  # e4m3: 3 mantissa bits
    reference = (w.float() / q.scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    assert torch.equal(q.weight.view(torch.uint8), reference.view(torch.uint8))
    assert is_finite(q.weight) and is_positive_scalar(q.scale)
    assert q.row_amax_max == pytest.approx(amax)
    assert q.row_amax_ratio >= 1.0


def test_quantize_source_is_untouched_and_chunking_is_invisible(monkeypatch):
    w = torch.randn(50, 30).to(torch.bfloat16)
    before = w.clone()
    whole = quantize_per_tensor(w)
    monkeypatch.setattr(fp8, "CHUNK_ELEMENTS", 7)  # 1 row at a time
    chunked = quantize_per_tensor(w)
    assert torch.equal(w, before)
    assert torch.equal(whole.weight.view(torch.uint8), chunked.weight.view(torch.uint8))
    assert torch.equal(whole.scale, chunked.scale)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_quantize_refuses_nonfinite(bad):
    w = torch.randn(20, 8).to(torch.bfloat16)
    w[13, 2] = bad
    with pytest.raises(NonFiniteHeadError, match="row 13"):
        quantize_per_tensor(w)


def test_quantize_refuses_zeros_and_bad_inputs():
    with pytest.raises(NonFiniteHeadError):
        quantize_per_tensor(torch.zeros(4, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="2-D"):
        quantize_per_tensor(torch.ones(4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bf16/fp16/fp32"):
        quantize_per_tensor(torch.ones(4, 4, dtype=torch.float8_e4m3fn))
    assert issubclass(NonFiniteHeadError, ValueError)


# ---------------------------------------------------------------- tensor_sha256


def test_tensor_sha256():
    t = torch.randn(40, 8).to(torch.bfloat16)
    expected = hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    assert tensor_sha256(t) == expected
    assert (
        tensor_sha256(t, rows=5)
        == hashlib.sha256(t[:5].view(torch.uint8).numpy().tobytes()).hexdigest()
    )
    tt = t.t()
    assert (
        tensor_sha256(tt)
        == hashlib.sha256(tt.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    )
