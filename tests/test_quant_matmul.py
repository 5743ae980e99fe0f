"""Quantized matmul and embed on packed GGML blocks, on every backend and kernel path, against the float64
product of the dequantized weights.

Tolerance: activations stay float32 (they are not quantized to 8 bit), so the packed product differs from the
exact float64 one only by float32 rounding of the decoded weights' products and sums: relative error about
1e-7 * sqrt(K). The normalised squared error (NMSE) bound of 1e-10 is that with a wide margin for every type;
the weights themselves are exact, because the reference dequantizes the very same blocks. The numba row
decoders are also checked alone: they must reproduce the numpy spec (ggml_blocks.dequantize) bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from blazr.backends.cpu import HAS_NUMBA, PACKED_FORMATS
from blazr.backends.cpu import Backend as CPUBackend
from blazr.errors import CheckpointError
from blazr.quant import QuantWeight, block_info, stack_rows
from blazr.quant.ggml_blocks import dequantize

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py)
pytestmark = pytest.mark.isa

# Q4_0 and Q5_0 fold their offset into q * d + m (m = -8d, -16d): +0.0 where the spec's (q - 8) * d gives
# -0.0 for a negative d, so for them decode equality is by value (-0.0 == 0.0), for every other type by bits.
SIGNED_ZERO_ONLY = {"Q4_0", "Q5_0"}
# No f16/f32 scale field: every byte pattern decodes to a finite or overflowing (inf) value, no NaN.
ANY_BYTES_OK = {"MXFP4", "NVFP4"}
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
NMSE_MAX = {fmt: 1e-10 for fmt in PACKED_FORMATS}  # f32 rounding only; see the module docstring
# The formats the per-format tests run: all, unless BLAZR_TEST_FORMATS (comma-separated) narrows them, as CI's
# reruns at other ISA levels do (one format per decoder family; .ci/run).
_ONLY = {f for f in os.environ.get("BLAZR_TEST_FORMATS", "").split(",") if f}
FORMATS = tuple(f for f in PACKED_FORMATS if not _ONLY or f in _ONLY)
# (T, N, K): a single row, rows not a multiple of the thread tasks, K = 4096 + 256, and T on both sides of
# the decode/prefill switch (cpu_kernels.GEMM_MIN_TOKENS).
SHAPES = [(1, 1, 256), (1, 33, 512), (3, 7, 4096 + 256), (9, 65, 768), (20, 130, 256)]


@pytest.fixture(autouse=True)
def float32_activations(monkeypatch):
    """These tests check the f32-activation kernels; the int8 path (cpu_kernels.INT8_FORMATS) rounds x and
    has its own tests (tests/test_quant_int8.py)."""
    if HAS_NUMBA:
        from blazr.quant import cpu_kernels

        monkeypatch.setattr(cpu_kernels, "INT8_FORMATS", frozenset())


def kernel_paths():
    paths = [pytest.param(False, id="numpy")]
    if HAS_NUMBA:
        paths.append(pytest.param(True, id="numba"))
    return paths


def random_weight(fmt: str, n: int, k: int, rng, byte_mask: int = 0xBF) -> QuantWeight:
    """Random blocks of `fmt`. Clearing bit 6 of every byte (the default mask) keeps every f16/f32/e8m0 scale
    field finite (its exponent's top bit is then 0), whatever the field offsets of the type."""
    block_elems, block_bytes = block_info(fmt)
    if k % block_elems:
        k = block_elems * max(1, k // block_elems)
    raw = rng.integers(0, 256, size=(n, k // block_elems * block_bytes), dtype=np.uint8) & byte_mask
    return QuantWeight(raw, fmt, (n, k))


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sum((got - want) ** 2) / max(np.sum(want**2), 1e-300))


@pytest.mark.parametrize("fast", kernel_paths())
@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_matches_dequantized_f64(fmt, fast, rng):
    be = CPUBackend(fast_kernels=fast)
    for t, n, k in SHAPES:
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        dense = dequantize(w.blocks, fmt, w.shape).astype(np.float64)
        got = be.download(be.matmul(be.upload(x), w))
        assert got.shape == (t, n) and got.dtype == np.float32
        err = nmse(got.astype(np.float64), x.astype(np.float64) @ dense.T)
        assert err <= NMSE_MAX[fmt], f"{fmt} {(t, n, k)}: NMSE {err:.2e} > {NMSE_MAX[fmt]:.0e}"


@needs_numba
@pytest.mark.parametrize("fmt", FORMATS)
def test_float32_gemm_on_numbas_pool_matches_dequantized_f64(fmt, rng):
    """cpu_f32_gemm, which prompts take instead of BLAS sgemm once their other matmuls run on numba's pool."""
    from blazr.quant import cpu_kernels

    for t, n, k in [(12, 1, 256), (13, 9, 768), (40, 65, 4096 + 256)]:
        assert cpu_kernels.path(t, fmt, False, blas=False) == "f32-gemm"
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        dense = dequantize(w.blocks, fmt, w.shape).astype(np.float64)
        err = nmse(
            cpu_kernels.matmul(x, w, int8=False, blas=False).astype(np.float64),
            x.astype(np.float64) @ dense.T,
        )
        assert err <= NMSE_MAX[fmt], f"{fmt} {(t, n, k)}: NMSE {err:.2e}"


@pytest.mark.parametrize("fast", kernel_paths())
@pytest.mark.parametrize("fmt", FORMATS)
def test_embed_decodes_exactly_the_rows(fmt, fast, rng):
    be = CPUBackend(fast_kernels=fast)
    w = random_weight(fmt, 40, 512, rng)
    ids = np.array([3, 0, 39, 3], dtype=np.int32)
    got = be.download(be.embed(w, be.upload(ids)))
    np.testing.assert_array_equal(got, dequantize(w.blocks, fmt, w.shape)[ids])


@needs_numba
def test_every_packed_format_has_a_numba_decoder():
    """Without one a format silently takes the slow numpy path on the fast backend."""
    from blazr.quant import cpu_kernels

    assert set(PACKED_FORMATS) <= set(cpu_kernels.FORMATS)
    be = CPUBackend(fast_kernels=True)
    assert all(be._quant_module(fmt) is cpu_kernels for fmt in PACKED_FORMATS)


@needs_numba
@pytest.mark.parametrize("fmt", FORMATS)
def test_numba_decode_matches_the_numpy_spec_bit_for_bit(fmt, rng):
    from blazr.quant import cpu_kernels

    for mask in (0xBF, 0xFF) if fmt in ANY_BYTES_OK else (0xBF,):
        for n, k in ((1, 256), (7, 4096 + 256), (33, 512)):
            w = random_weight(fmt, n, k, rng, byte_mask=mask)
            got, want = cpu_kernels.dequantize(w), dequantize(w.blocks, fmt, w.shape)  # (n, K) each
            assert got.shape == want.shape and got.dtype == np.float32
            if fmt in SIGNED_ZERO_ONLY:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=fmt)


@pytest.mark.parametrize("fast", kernel_paths())
def test_mixed_format_row_stack(fast, rng):
    """Q4_K_M fuses Q4_K q/k with a Q6_K v: the stack multiplies part by part into one (T, N) result."""
    be = CPUBackend(fast_kernels=fast)
    parts = [random_weight("Q4_K", 32, 512, rng), random_weight("Q4_K", 8, 512, rng)]
    parts.append(random_weight("Q6_K", 8, 512, rng))
    stacked = stack_rows(parts)
    assert stacked.format == "Q4_K+Q6_K" and stacked.shape == (48, 512)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    dense = np.concatenate([dequantize(p.blocks, p.format, p.shape) for p in parts]).astype(np.float64)
    got = be.download(be.matmul(be.upload(x), stacked)).astype(np.float64)
    assert nmse(got, x.astype(np.float64) @ dense.T) <= 1e-10


def test_same_format_parts_concatenate_into_one_weight(rng):
    parts = [random_weight("Q8_0", 5, 64, rng), random_weight("Q8_0", 3, 64, rng)]
    fused = stack_rows(parts)
    assert isinstance(fused, QuantWeight) and fused.shape == (8, 64)
    np.testing.assert_array_equal(fused.blocks[5:], parts[1].blocks)


def test_wrong_block_bytes_are_refused():
    with pytest.raises(CheckpointError, match="Q4_0 weight of shape"):
        QuantWeight(np.zeros((2, 17), np.uint8), "Q4_0", (2, 32))


def test_cpu_supports_packed_formats():
    be = CPUBackend()
    assert be.supports("matmul", "f32", "Q4_K") and be.supports("embed", None, "Q8_0")
    assert not be.supports("matmul", "f32", "F16")  # F16 weights are widened at load, never packed
