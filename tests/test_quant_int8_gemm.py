"""The int8 prefill GEMM (blazr.quant.cpu_int8_gemm): row unpacking, the VNNI tile, the whole matmul.

References, as for the decode kernels (tests/test_quant_int8.py, which derives the tolerances):
* unpacking: ws * q - mins per value against gguf-exact dequantization (ggml_blocks), within float32
  rounding of the two products (|error| <= 2^-22 (|ws q| + |mins|));
* the integer part: the float64 product of the dequantized weights and the *same* int8-rounded activations;
  only float32 rounding remains (NMSE_EXACT), while one wrong byte or lane scale gives NMSE ~1e-8 or more;
* accuracy: against the float64 product with float32 x, NMSE_MAX = 1e-4 (x rounded to int8 per 32 values).
* Q8_0 (signed weight bytes, cpu_gemm_simd's signed tile): against the int64 dot of every 4 values (the
  tile's lanes) and against the int8 row dots, within the float32 rounding bound derived at LANE_ROUNDING.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

from blazr.quant import cpu_kernels  # noqa: E402
from blazr.quant.cpu_blocks import format_tag  # noqa: E402
from blazr.quant.cpu_gemm_simd import ROWS, SIGNED_TILE_KERNELS, TILE_KERNELS, TOKENS  # noqa: E402
from blazr.quant.cpu_int8_gemm import AVAILABLE, FORMATS, matmul_int8_gemm  # noqa: E402
from blazr.quant.cpu_unpack import SIGNED, UNPACKERS, unpack_row  # noqa: E402
from blazr.quant.ggml_blocks import dequantize  # noqa: E402
from tests.test_quant_int8 import NMSE_EXACT, NMSE_MAX, int8_matmul, nmse, quantized, random_weight  # noqa: E402

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py)
pytestmark = pytest.mark.isa

needs_int8_gemm = pytest.mark.skipif(
    not AVAILABLE, reason="the int8 GEMM runs only on x86 CPUs with VNNI or AVX2"
)
# (T, N, K): T from the switch (8) up, rows and tokens not multiples of the (4, 3) tile, K = 4096 + 256
SHAPES = [(8, 1, 256), (13, 7, 512), (40, 33, 768), (9, 5, 4096 + 256)]


def dense(w) -> np.ndarray:
    """(N, K) float64 dequantized weights."""
    return dequantize(w.blocks, w.format, w.shape).astype(np.float64)


@njit
def _unpack_all(tag, blocks, q, ws, mins):
    for i in range(blocks.shape[0]):
        unpack_row(tag, blocks[i], q[i], ws[i], mins[i])


@pytest.mark.parametrize("fmt", sorted(UNPACKERS))
def test_unpacked_rows_dequantize_to_the_reference(fmt, rng):
    w = random_weight(fmt, 5, 512, rng)
    n, k = w.shape
    q = np.empty((n, k), np.uint8)  # (N, K)
    ws = np.empty((n, k // 4), np.float32)  # (N, K/4)
    mins = np.empty((n, k // 16), np.float32)  # (N, K/16)
    _unpack_all(format_tag(fmt), w.blocks, q, ws, mins)
    values = q.view(np.int8) if fmt in SIGNED else q  # (N, K) the weight integers
    scaled = np.repeat(ws.astype(np.float64), 4, axis=1) * values  # (N, K)
    offsets = np.repeat(mins.astype(np.float64), 16, axis=1)  # (N, K)
    want = dense(w)
    assert np.all(np.abs(scaled - offsets - want) <= 2.0**-22 * (np.abs(scaled) + np.abs(offsets)))


def gemm(x: np.ndarray, w) -> np.ndarray:
    out = np.empty((x.shape[0], w.shape[0]), np.float32)  # (T, N)
    matmul_int8_gemm(x, w.blocks, format_tag(w.format), out, 2)
    return out


@needs_int8_gemm
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_integer_part_is_exact(fmt, rng):
    shapes = SHAPES + ([(7, 3, 96)] if fmt in ("Q4_0", "Q5_1", "I4Z") else [])  # K = 32 * odd: padded to 64
    for t, n, k in shapes:
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        xq, dx, _ = quantized(x)
        x_used = (xq.reshape(t, -1, 32) * dx[:, :, None].astype(np.float64)).reshape(t, -1)  # (T, K)
        err = nmse(gemm(x, w).astype(np.float64), x_used @ dense(w).T)
        assert err <= NMSE_EXACT, f"{fmt} {(t, n, k)}: NMSE {err:.2e}"


@needs_int8_gemm
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_accuracy_against_float64(fmt, rng):
    got, want = [], []
    for t, n, k in SHAPES:
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        got.append(gemm(x, w).astype(np.float64).ravel())
        want.append((x.astype(np.float64) @ dense(w).T).ravel())
    err = nmse(np.concatenate(got), np.concatenate(want))
    assert err <= NMSE_MAX, f"{fmt}: NMSE {err:.2e}"


@needs_int8_gemm
def test_non_finite_activations_give_nan_not_garbage(rng):
    w = random_weight("Q4_K", 6, 512, rng)
    x = rng.standard_normal((9, 512)).astype(np.float32)
    x[2, 300] = np.inf
    x[5, 7] = np.nan
    out = gemm(x, w)
    assert np.isnan(out[[2, 5]]).all()
    assert np.isfinite(np.delete(out, [2, 5], axis=0)).all()


def _tile_runner(kernel, step: int):
    @njit
    def run(q, ws, mins, xq, dx, xsum, acc):
        for r0 in range(0, q.shape[0], ROWS):
            for t0 in range(0, xq.shape[0], TOKENS):
                kernel(q, ws, mins, xq, dx, xsum, acc, r0, t0, q.shape[1] // step, mins.shape[1] * 4 // step)

    return run


@pytest.mark.parametrize("variant", sorted(TILE_KERNELS), ids=lambda v: f"{v[1]}-{8 * v[0]}bit")
def test_every_lane_dot_variant_computes_the_tile(variant, rng):
    """Each tile this CPU can run (VNNI and maddubs, 512- and 256-bit) against an int64/float64 reference, on
    weight bytes up to 63 (the most any unpacked format stores) and activations over the whole int8 range."""
    r, t, k = 2 * ROWS, 2 * TOKENS, 512
    q = rng.integers(0, 64, (r, k), dtype=np.uint8)
    q[0, :64] = 63
    ws = rng.standard_normal((r, k // 4)).astype(np.float32)
    mins = rng.standard_normal((r, k // 16)).astype(np.float32)
    xq = rng.integers(-128, 128, (t, k), dtype=np.int8)
    xq[0, :64] = -128
    dx = rng.random((t, k // 32)).astype(np.float32)
    xsum = rng.standard_normal((t, k // 16)).astype(np.float32)
    lanes = (q.reshape(r, k // 4, 4).astype(np.int64)[None] * xq.reshape(t, 1, k // 4, 4)).sum(axis=3)
    want = np.einsum(
        "trl,rl,tl->tr", lanes, ws.astype(np.float64), np.repeat(dx, 8, axis=1).astype(np.float64)
    )
    want -= xsum.astype(np.float64) @ mins.astype(np.float64).T  # (T, R)
    acc = np.empty((t, r), np.float32)  # (T, R)
    _tile_runner(TILE_KERNELS[variant], variant[0])(q, ws, mins, xq, dx, xsum, acc)
    assert nmse(acc.astype(np.float64), want) <= NMSE_EXACT


@pytest.mark.parametrize("variant", sorted(SIGNED_TILE_KERNELS), ids=lambda v: f"{v[1]}-{8 * v[0]}bit")
def test_every_signed_tile_variant_computes_the_tile(variant, rng):
    """The signed tile (Q8_0's int8 weight bytes) of each lane dot this CPU runs, against an int64/float64
    reference: weights over the whole int8 range (-128 too: |-128| is 128 in the maddubs sign trick, the
    bias of vpdpbusd's flipped bytes is exact), activations over -127..127 (all quantize_rows gives: the
    sign trick would overflow on -128); mins and xsum are not read (Q8_0 has no offsets)."""
    r, t, k = 2 * ROWS, 2 * TOKENS, 512
    w = rng.integers(-128, 128, (r, k), dtype=np.int8)  # (R, K)
    w[0, :64], w[1, :64] = -128, 127
    ws = rng.standard_normal((r, k // 4)).astype(np.float32)  # (R, K/4)
    mins = rng.standard_normal((r, k // 16)).astype(np.float32)  # (R, K/16) ignored
    xq = rng.integers(-127, 128, (t, k), dtype=np.int8)  # (T, K)
    xq[0, :64], xq[1, :64] = -127, 127
    dx = rng.random((t, k // 32)).astype(np.float32)  # (T, K/32)
    xsum = rng.standard_normal((t, k // 16)).astype(np.float32)  # (T, K/16) ignored
    lanes = (w.reshape(r, k // 4, 4).astype(np.int64)[None] * xq.reshape(t, 1, k // 4, 4)).sum(axis=3)
    want = np.einsum(
        "trl,rl,tl->tr", lanes, ws.astype(np.float64), np.repeat(dx, 8, axis=1).astype(np.float64)
    )  # (T, R)
    acc = np.empty((t, r), np.float32)  # (T, R)
    _tile_runner(SIGNED_TILE_KERNELS[variant], variant[0])(w.view(np.uint8), ws, mins, xq, dx, xsum, acc)
    assert nmse(acc.astype(np.float64), want) <= NMSE_EXACT


# float32 rounding of the GEMM's Q8_0 sum, relative to the sum of |d dx dot| over its 4-value lanes: per lane
# d * dx and the product with the (exact) integer lane dot are rounded, then K/64 fused multiply-adds into 16
# lanes and a 16-lane sum (at most 4 + 2 + K/64 roundings of 2^-24 in all); the row dots round fewer times
# per 32-value block. Bound: 2^-24 (K/64 + 8), twice that between the two paths.
def lane_rounding(k: int) -> float:
    return 2.0**-24 * (k / 64 + 8)


def q8_0_lane_terms(x: np.ndarray, w) -> np.ndarray:
    """(T, N, K/4) float64 d dx dot of each 4-value lane, the dot the int64 product of the weight integers
    and the int8-rounded x (as the GEMM's lanes and, summed by 8, the row dots' block dots)."""
    n, k = w.shape
    blk = w.blocks.reshape(n, k // 32, 34)  # (N, K/32, block bytes)
    d = blk[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float64)  # (N, K/32)
    q = blk[:, :, 2:].view(np.int8).astype(np.int64).reshape(n, k // 4, 4)  # (N, K/4, 4)
    xq, dx, _ = quantized(x)
    dots = np.einsum("nlj,tlj->tnl", q, xq.reshape(len(x), k // 4, 4).astype(np.int64))  # (T, N, K/4)
    scale = d[None] * dx[:, None, :].astype(np.float64)  # (T, N, K/32)
    return dots * np.repeat(scale, 8, axis=2)


@needs_int8_gemm
@pytest.mark.parametrize("t", [8, 9, 33])
def test_q8_0_gemm_equals_the_int8_row_dots(t, rng):
    """A token's Q8_0 output is the same sum whether its matmul takes the GEMM (a prompt) or the int8 row
    dots (decode): both are exact in int32 per 4 values (per 32 in the row dots), so they differ only by
    float32 rounding of the scaling and summing (lane_rounding), not bitwise: the row dots sum per 32-value
    block, the GEMM per 4-value lane. K is a multiple of 32 only (96 and 800 are padded to 64 in the GEMM),
    N odd; -128 and 127 weight bytes included."""
    for n, k in [(7, 96), (33, 800), (5, 4096 + 32)]:
        w = random_weight("Q8_0", n, k, rng)
        blocks = w.blocks.copy()  # a QuantWeight's blocks are read-only
        blk = blocks.reshape(n, k // 32, 34)
        blk[0, :, 2:] = 0x80  # a row of -128 weights
        blk[n - 1, 0, 2:34:2] = 0x7F
        w = dataclasses.replace(w, blocks=blocks)
        x = rng.standard_normal((t, k)).astype(np.float32)
        x[0, :32] = [-1.0, 1.0] * 16  # rounds to -127 and 127
        terms = q8_0_lane_terms(x, w)  # (T, N, K/4)
        want, bound = terms.sum(axis=2), lane_rounding(k) * np.abs(terms).sum(axis=2)  # (T, N) each
        got, rows = gemm(x, w).astype(np.float64), int8_matmul(x, w).astype(np.float64)
        assert np.all(np.abs(got - want) <= bound), f"{(t, n, k)}: GEMM"
        assert np.all(np.abs(rows - want) <= bound), f"{(t, n, k)}: row dots"
        assert np.all(np.abs(got - rows) <= 2 * bound), f"{(t, n, k)}: GEMM against the row dots"


@pytest.mark.parametrize("fmt", ["Q4_K", "Q8_0"])
def test_matmul_takes_the_gemm_for_prompts(fmt, rng):
    """cpu_kernels.matmul: from int8_gemm_min_tokens(fmt) tokens an INT8_FORMATS weight (Q8_0 too, as
    llama.cpp rounds x for it) takes the int8 GEMM where the CPU has one, the lane dots a token fewer (else the
    int8 row dots: x is rounded the same way for every token count); int8=False keeps exact float
    activations for every format."""
    assert fmt in cpu_kernels.INT8_FORMATS
    tokens = cpu_kernels.int8_gemm_min_tokens(fmt)
    want = ("int8-gemm" if AVAILABLE else "int8") if fmt in cpu_kernels.INT8_FORMATS else "sgemm"
    assert cpu_kernels.path(max(tokens, cpu_kernels.GEMM_MIN_TOKENS), fmt, True) == want
    assert cpu_kernels.path(tokens - 1, fmt, True) == ("int8-lanes" if AVAILABLE else "int8")
    assert cpu_kernels.path(cpu_kernels.GEMM_MIN_TOKENS, fmt, False) == "sgemm"
    w = random_weight(fmt, 20, 512, rng)
    x = rng.standard_normal((tokens, 512)).astype(np.float32)
    if want == "int8-gemm":
        np.testing.assert_array_equal(cpu_kernels.matmul(x, w), gemm(x, w))
    exact = x.astype(np.float64) @ dense(w).T
    assert nmse(cpu_kernels.matmul(x, w, int8=False).astype(np.float64), exact) <= NMSE_EXACT


@needs_int8_gemm
@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("qtype", ["Q5_1", "Q5_0", "Q4_1", "Q4_0"])
def test_prefill_logits_stay_close_to_the_dequantized_model(tmp_path, name, qtype):
    """A 13-token prefill of the tiny parity models through the GEMM: the logits at every position within 10%
    (relative L2) of the dequantized float model's, argmax agreeing on at least 80% of the positions (the
    decode test's floors, tests/test_quant_int8.py; measured 2.9-6.4% and 0.92-1.0)."""
    from blazr.models.batch import ForwardBatch
    from tests.test_quant_models import BLOCK, PROMPT, packed_and_dense

    assert cpu_kernels.path(len(PROMPT), qtype, True) == "int8-gemm"
    packed, dense = packed_and_dense(tmp_path, name, qtype, fast=True)
    batch = ForwardBatch.single(PROMPT, 0, list(range(8)), BLOCK, all_logits=True)
    got = packed.be.download(packed(batch, packed.make_cache(8, BLOCK)))  # (T, V)
    want = dense.be.download(dense(batch, dense.make_cache(8, BLOCK)))  # (T, V)
    assert got.shape == want.shape == (len(PROMPT), want.shape[1])
    errors = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    same = np.argmax(got, axis=1) == np.argmax(want, axis=1)
    assert errors.max() <= 0.10, f"{name} {qtype}: relative logit errors {np.round(errors, 3)}"
    assert same.mean() >= 0.80, f"{name} {qtype}: argmax agreement {same.mean():.2f}"


@needs_int8_gemm
def test_prompts_stay_on_numbas_pool_with_int8_activations(rng, monkeypatch):
    """Once a packed matmul rounds x to int8 (the default where the int8 GEMM runs), a float-only format's
    (IQ4_NL's) prompt matmul takes the float32 GEMM on numba's pool, as every other prompt op then does,
    instead of BLAS sgemm; a model of IQ4_NL alone, or --dtype f32, keeps sgemm. All stay exact in float."""
    from blazr.backends.cpu import Backend

    sgemm_calls = []
    real_sgemm = cpu_kernels._matmul_sgemm
    monkeypatch.setattr(cpu_kernels, "_matmul_sgemm", lambda *a: sgemm_calls.append(1) or real_sgemm(*a))
    assert "IQ4_NL" not in cpu_kernels.INT8_FORMATS
    q4k, iq4 = random_weight("Q4_K", 8, 512, rng), random_weight("IQ4_NL", 8, 512, rng)
    x = rng.standard_normal((cpu_kernels.GEMM_MIN_TOKENS, 512)).astype(np.float32)
    exact = x.astype(np.float64) @ dense(iq4).T

    for backend, int8, want_sgemm in [(Backend(), True, 0), (Backend(), False, 1)]:
        backend.set_int8_activations(int8)
        backend.matmul(x, q4k)
        assert backend._numba_prefill == int8
        sgemm_calls.clear()
        assert nmse(backend.matmul(x, iq4).astype(np.float64), exact) <= NMSE_EXACT
        assert len(sgemm_calls) == want_sgemm

    iq4_alone = Backend()
    assert nmse(iq4_alone.matmul(x, iq4).astype(np.float64), exact) <= NMSE_EXACT
    assert len(sgemm_calls) == 2 and not iq4_alone._numba_prefill
    assert cpu_kernels.path(len(x), "IQ4_NL", True, blas=False) == "f32-gemm"
