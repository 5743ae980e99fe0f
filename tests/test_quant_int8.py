"""The int8-activation decode kernels (blazr.quant.cpu_int8_dots) and their SIMD intrinsics (cpu_simd).

Three levels, each against numpy:
* the intrinsics: exact int32 dot products on random and extreme bytes (0, 255 weights; -128, 127 inputs);
* the integer part of every format's kernel: against the float64 product of the dequantized weights and the
  *same* quantized activations (xq * dx). The only differences left are float32 rounding of the block sums
  and of the spec's f32 weights (relative ~1e-7 each), so NMSE <= 1e-10 holds with a wide margin, while one
  wrong integer in one block dot (relative ~1e-3 of that block) already gives NMSE ~1e-8 on these sizes.
  Q8_0 and Q4_0 are also checked against an int64 per-block reference, element by element;
* accuracy against the exact float64 product with float32 x. x is rounded to int8 with dx = absmax / 127 per
  32 values: each value's error is uniform in +-dx/2, variance dx^2 / 12 = absmax^2 / (127^2 * 12). For
  Gaussian x, absmax of 32 values is about 2.5 sigma (rarely above 3.5), so the activations' NMSE is
  about 2.5^2 / 193548 = 3.2e-5 (at most 6.3e-5). Errors are independent of the random weights, so the
  product's NMSE is the same; NMSE_MAX = 1e-4 (measured 1.3e-5 .. 4.5e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

from blazr.quant import QuantWeight, block_info, cpu_int8_gemm, cpu_kernels  # noqa: E402
from blazr.quant.cpu_blocks import format_tag  # noqa: E402
from blazr.quant.cpu_int8_dots import INT8_DOTS, matmul_int8, quantize_rows  # noqa: E402
from blazr.quant.cpu_simd import (  # noqa: E402
    dot_i8_biased,
    dot_q2_k,
    dot_q3_k,
    dot_q4,
    dot_q4_k,
    dot_q5,
    dot_q5_k,
    dot_q6_k,
    dot_u8,
    f16_at,
)
from blazr.quant.ggml_blocks import dequantize  # noqa: E402

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py)
pytestmark = pytest.mark.isa

FORMATS = sorted(INT8_DOTS)
NMSE_MAX = 1e-4  # int8 activations; derived in the module docstring
NMSE_EXACT = 1e-10  # f32 rounding only
# (T, N, K): a single row, N not a multiple of the thread tasks, K = 4096 + 256, T up to the int8 switch
SHAPES = [(1, 1, 256), (1, 33, 512), (3, 7, 4096 + 256), (4, 65, 768)]


def random_weight(fmt: str, n: int, k: int, rng) -> QuantWeight:
    """Random blocks; clearing bit 6 of every byte keeps each f16 scale finite."""
    block_elems, block_bytes = block_info(fmt)
    k = block_elems * max(1, k // block_elems)
    raw = rng.integers(0, 256, size=(n, k // block_elems * block_bytes), dtype=np.uint8) & 0xBF
    return QuantWeight(raw, fmt, (n, k))


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sum((got - want) ** 2) / max(np.sum(want**2), 1e-300))


def quantized(x: np.ndarray):
    t, k = x.shape
    xq = np.empty((t, k), np.int8)  # (T, K)
    dx = np.empty((t, k // 32), np.float32)  # (T, K/32)
    xs = np.empty((t, k // 16), np.int32)  # (T, K/16)
    quantize_rows(x, xq, dx, xs)
    return xq, dx, xs


def int8_matmul(x: np.ndarray, w: QuantWeight) -> np.ndarray:
    out = np.empty((x.shape[0], w.shape[0]), np.float32)  # (T, N)
    matmul_int8(x, w.blocks, format_tag(w.format), out, 4)
    return out


# ---- intrinsics ---------------------------------------------------------------------------------------


@njit
def _run_intrinsics(w, x, wo, xo):
    pair_k4 = dot_q4_k(w, wo, x, xo)
    pair_k5 = dot_q5_k(w, wo, wo + 64, 3, x, xo)
    pair_k6 = dot_q6_k(w, wo, wo + 32, 0, 2, x, xo)
    pair_k2 = dot_q2_k(w, wo, 2, x, xo)
    pair_k3 = dot_q3_k(w, wo, 2, wo + 32, 5, x, xo)
    return (
        dot_u8(w, wo, x, xo), dot_i8_biased(w, wo, x, xo), dot_q4(w, wo, x, xo), dot_q5(w, wo, wo + 16, x, xo),
        pair_k4[0], pair_k4[1], pair_k5[0], pair_k5[1], pair_k6[0], pair_k6[1], pair_k2[0], pair_k2[1],
        pair_k3[0], pair_k3[1], f16_at(w, wo),
    )  # fmt: skip


def _numpy_intrinsics(w, x, wo, xo):
    w, x = w.astype(np.int64), x.astype(np.int64)
    lanes = np.arange(32)
    nib = np.concatenate([w[wo : wo + 16] & 15, w[wo : wo + 16] >> 4])
    qh = int(w[wo + 16]) | int(w[wo + 17]) << 8 | int(w[wo + 18]) << 16 | int(w[wo + 19]) << 24
    q5 = nib | ((qh >> lanes) & 1) << 4
    chunk, high = w[wo : wo + 32], w[wo + 64 : wo + 96]
    k5_lo, k5_hi = (chunk & 15) | ((high >> 6) & 1) << 4, (chunk >> 4) | ((high >> 7) & 1) << 4
    q6 = (chunk & 15) | ((w[wo + 32 : wo + 64] >> 2) & 3) << 4
    x32, x64 = x[xo : xo + 32], x[xo + 32 : xo + 64]
    q2 = (chunk >> 2) & 3
    q3 = q2 | ((w[wo + 32 : wo + 64] >> 5) & 1) << 2
    signed = chunk - 256 * (chunk > 127)
    return (
        chunk @ x32, (signed + 128) @ x32, nib @ x32, q5 @ x32, (chunk & 15) @ x32, (chunk >> 4) @ x64,
        k5_lo @ x32, k5_hi @ x64, q6[:16] @ x32[:16], q6[16:] @ x32[16:], q2[:16] @ x32[:16], q2[16:] @ x32[16:],
        q3[:16] @ x32[:16], q3[16:] @ x32[16:],
        np.float32(w[wo : wo + 2].astype(np.uint8).view(np.float16)[0]),
    )  # fmt: skip


@pytest.mark.parametrize("case", ["random", "max", "min", "mixed"])
def test_intrinsics_match_numpy_int64(case, rng):
    w = rng.integers(0, 256, 300, dtype=np.uint8)
    x = rng.integers(-128, 128, 300).astype(np.int8)
    if case == "max":  # largest products: 255 * -128 and 255 * 127 in every lane
        w[:] = 255
        x[::2], x[1::2] = -128, 127
    elif case == "min":
        w[:] = 0
        x[:] = -128
    elif case == "mixed":
        w[::3], x[::5] = 255, -128
    for wo, xo in [(0, 0), (3, 7), (101, 200), (203, 236)]:  # unaligned offsets, reads up to the end
        got, want = _run_intrinsics(w, x, wo, xo), _numpy_intrinsics(w, x, wo, xo)
        for i, (g, e) in enumerate(zip(got, want, strict=True)):
            if i == len(got) - 1:
                assert g == e or (np.isnan(g) and np.isnan(e)), (case, wo, xo)
            else:
                assert int(g) == int(e), (case, wo, xo, i)


# ---- activation quantization ----------------------------------------------------------------------------


def test_quantize_rows_rounds_each_block_to_its_absmax(rng):
    x = rng.standard_normal((3, 256)).astype(np.float32) * np.float32(5.0)
    x[1, 32:64] = 0.0  # an all-zero block: scale 0, values 0
    x[2, 64] = -1e30  # one huge value: the rest of its block rounds to 0
    xq, dx, xs = quantized(x)
    blocks = x.reshape(3, 8, 32)
    np.testing.assert_array_equal(dx, np.abs(blocks).max(axis=2) / np.float32(127.0))
    assert np.abs(xq.astype(np.int32)).max() == 127 and xq.min() >= -127
    err = np.abs(xq.reshape(3, 8, 32) * dx[:, :, None].astype(np.float64) - blocks)
    assert np.all(err <= dx[:, :, None] * (0.5 + 1e-5))
    np.testing.assert_array_equal(xs, xq.reshape(3, 16, 16).astype(np.int32).sum(axis=2))
    assert dx[1, 1] == 0 and not xq[1, 32:64].any()


def test_non_finite_activations_give_nan_not_garbage(rng):
    w = random_weight("Q4_0", 5, 64, rng)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    x[0, 40], x[1, 3] = np.nan, np.inf
    assert np.isnan(int8_matmul(x, w)).all()


# ---- kernels -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_integer_part_is_exact(fmt, rng):
    for t, n, k in SHAPES:
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        xq, dx, _ = quantized(x)
        x_used = (xq.reshape(t, -1, 32) * dx[:, :, None].astype(np.float64)).reshape(t, -1)  # (T, K)
        dense = dequantize(w.blocks, fmt, w.shape).astype(np.float64)  # (N, K)
        err = nmse(int8_matmul(x, w).astype(np.float64), x_used @ dense.T)
        assert err <= NMSE_EXACT, f"{fmt} {(t, n, k)}: NMSE {err:.2e}"


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_block_dots_match_an_int64_reference(fmt, rng):
    """out = sum_b d_b dx_b dot_b with dot_b the int64 dot of the weight integers and xq."""
    t, n, k = 2, 9, 4096 + 256
    w = random_weight(fmt, n, k, rng)
    x = rng.standard_normal((t, k)).astype(np.float32)
    xq, dx, _ = quantized(x)
    blk = w.blocks.reshape(n, k // 32, -1)  # (N, K/32, block_bytes)
    d = blk[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float64)  # (N, K/32)
    if fmt == "Q8_0":
        q = blk[:, :, 2:].view(np.int8).astype(np.int64)  # (N, K/32, 32)
    else:
        qs = blk[:, :, 2:].astype(np.int64)
        q = np.concatenate([qs & 15, qs >> 4], axis=2) - 8  # (N, K/32, 32)
    dots = np.einsum("nbj,tbj->tnb", q, xq.reshape(t, k // 32, 32).astype(np.int64))  # (T, N, K/32) exact
    terms = d[None] * dx[:, None, :].astype(np.float64) * dots  # (T, N, K/32)
    got = int8_matmul(x, w).astype(np.float64)
    assert np.all(np.abs(got - terms.sum(axis=2)) <= 1e-5 * np.abs(terms).sum(axis=2))


@pytest.mark.parametrize("fmt", FORMATS)
def test_accuracy_against_float64(fmt, rng):
    """Each output within the worst case sum_j |w_j| dx_j / 2; the NMSE over all outputs within NMSE_MAX (a
    single output's squared error over its square is too noisy to bound: the exact value can be near 0)."""
    got_all, want_all = [], []
    for t, n, k in SHAPES:
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        dense = dequantize(w.blocks, fmt, w.shape).astype(np.float64)  # (N, K)
        got, want = int8_matmul(x, w).astype(np.float64), x.astype(np.float64) @ dense.T  # (T, N) each
        half_step = np.repeat(quantized(x)[1].astype(np.float64) / 2, 32, axis=1)  # (T, K)
        worst = half_step @ np.abs(dense).T  # (T, N)
        assert np.all(np.abs(got - want) <= worst * (1 + 1e-4) + 1e-6 * np.abs(want)), f"{fmt} {(t, n, k)}"
        got_all.append(got.ravel())
        want_all.append(want.ravel())
    err = nmse(np.concatenate(got_all), np.concatenate(want_all))
    assert err <= NMSE_MAX, f"{fmt}: NMSE {err:.2e} > {NMSE_MAX:.0e}"


@pytest.mark.parametrize("fmt", ["Q4_K", "Q8_0"])
def test_matmul_switch_picks_the_path(fmt, rng, monkeypatch):
    """cpu_kernels.matmul: an INT8_FORMATS weight rounds x to int8 below the GEMM's token count, with the lane
    dots (the GEMM's rounding, tests/test_quant_int8_lanes.py) where the CPU has the GEMM, else these row dots;
    int8=False, or a format outside INT8_FORMATS, keeps exact f32 activations."""
    from blazr.quant.cpu_int8_lanes import FORMATS as LANE_FORMATS

    w = random_weight(fmt, 20, 512, rng)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    exact = x.astype(np.float64) @ dequantize(w.blocks, fmt, w.shape).astype(np.float64).T
    monkeypatch.setattr(cpu_kernels, "INT8_FORMATS", frozenset({fmt}))
    assert cpu_kernels.path(len(x), fmt, True) == ("int8-lanes" if fmt in LANE_FORMATS else "int8")
    monkeypatch.setattr(cpu_kernels, "LANE_FORMATS", frozenset())
    assert cpu_kernels.path(len(x), fmt, True) == "int8"
    np.testing.assert_array_equal(cpu_kernels.matmul(x, w), int8_matmul(x, w))
    assert nmse(cpu_kernels.matmul(x, w, int8=False).astype(np.float64), exact) <= NMSE_EXACT
    monkeypatch.setattr(cpu_kernels, "INT8_FORMATS", frozenset())
    assert nmse(cpu_kernels.matmul(x, w).astype(np.float64), exact) <= NMSE_EXACT


# ---- tiny models: the default path against the dequantized weights ------------------------------------------


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("qtype", ["Q5_1", "Q5_0", "Q4_1", "Q4_0"])
def test_int8_decode_logits_stay_close_to_the_dequantized_model(tmp_path, name, qtype):
    """Teacher-forced decode of the tiny parity models (the dense model's own greedy tokens fed to both):
    per step, the int8-activation logits are within 10% (relative L2) of the dequantized float model's, and
    their argmax agrees on at least 80% of the steps (measured: errors 1.1-5.8%, agreement 0.94-1.0). These
    random models have top-2 logit gaps far below real models' (0.15 of a spread of ~4), so free-running
    greedy ids part after a few near-ties; the real SmolLM2 is held to its float reference in
    tests/test_real_model_reference.py."""
    from blazr.models.batch import ForwardBatch
    from tests.test_quant_models import BLOCK, PROMPT, packed_and_dense

    packed, dense = packed_and_dense(tmp_path, name, qtype, fast=True)
    packed.be.set_int8_activations(True)  # the default only where the CPU has the int8 GEMM
    assert qtype in cpu_kernels.INT8_FORMATS
    caches = packed.make_cache(8, BLOCK), dense.make_cache(8, BLOCK)
    table = list(range(8))

    def step(model, cache, ids, pos):
        return model.be.download(model(ForwardBatch.single(ids, pos, table, BLOCK), cache))[-1]  # (V,)

    step(packed, caches[0], PROMPT, 0)
    token = int(np.argmax(step(dense, caches[1], PROMPT, 0)))
    errors, same = [], []
    for i in range(16):  # one-token steps: the int8 path
        pos = len(PROMPT) + i
        got, want = step(packed, caches[0], [token], pos), step(dense, caches[1], [token], pos)
        errors.append(float(np.linalg.norm(got - want) / np.linalg.norm(want)))
        same.append(int(np.argmax(got)) == int(np.argmax(want)))
        token = int(np.argmax(want))
    assert max(errors) <= 0.10, f"{name} {qtype}: relative logit errors {np.round(errors, 3)}"
    assert np.mean(same) >= 0.80, f"{name} {qtype}: argmax agreement {np.mean(same):.2f}"


# ---- --dtype chooses the activation type ------------------------------------------------------------------


def test_dtype_chooses_int8_or_exact_float_activations(tmp_path, monkeypatch):
    """Unset: the CPU's default int8 path; --dtype q8 asks for it; an explicit --dtype f32 keeps float32
    activations, so its logits equal the float path's exactly."""
    from blazr.backends.cpu import Backend
    from blazr.config import normalize_dtype
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.models.batch import ForwardBatch
    from tests.gguf_writer import write_gguf
    from tests.test_quant_models import BLOCK, tiny_config, tiny_weights

    assert normalize_dtype("int8") == normalize_dtype("Q8") == "q8"
    path = write_gguf(tmp_path / "q4.gguf", tiny_config("llama"), tiny_weights("llama"), quantize="Q4_0")

    def decode_logits(dtype):
        backend = Backend()
        model = build_model(load_checkpoint(path), backend, dtype)
        cache = model.make_cache(4, BLOCK)
        model(ForwardBatch.single([5, 17, 99], 0, [0, 1, 2, 3], BLOCK), cache)
        logits = backend.download(model(ForwardBatch.single([42], 3, [0, 1, 2, 3], BLOCK), cache))
        return backend.int8_activations, logits

    (default_on, default), (q8_on, q8), (f32_on, f32) = map(decode_logits, (None, "q8", "f32"))
    # the default rounds where the CPU has the int8 GEMM for prompts (cpu_int8_gemm.AVAILABLE)
    assert default_on == cpu_int8_gemm.AVAILABLE and q8_on and not f32_on
    np.testing.assert_array_equal(default, q8 if default_on else f32)
    monkeypatch.setattr(cpu_kernels, "INT8_FORMATS", frozenset())
    _, float_path = decode_logits(None)
    np.testing.assert_array_equal(f32, float_path)
    assert not np.array_equal(q8, f32)  # the rounding is real, so the switch is what made them equal


def test_dtype_q8_on_a_device_without_int8_activations_is_refused(tmp_path):
    from blazr.errors import UnsupportedError
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.conftest import AVAILABLE_BACKENDS
    from tests.gguf_writer import write_gguf
    from tests.test_quant_models import tiny_config, tiny_weights

    if "wgpu" not in AVAILABLE_BACKENDS:
        pytest.skip("no WebGPU adapter here")
    from blazr.backends import get_backend

    path = write_gguf(tmp_path / "q4.gguf", tiny_config("llama"), tiny_weights("llama"), quantize="Q4_0")
    with pytest.raises(UnsupportedError, match="--dtype q8 .* cpu backend option; device wgpu"):
        build_model(load_checkpoint(path), get_backend("wgpu"), "q8")


def test_dense_matmuls_share_numbas_pool_once_packed_kernels_run(rng):
    """After a packed matmul, few-token dense matmuls (an F32 LM head behind quantized layers) run on numba's
    pool instead of OpenBLAS's, whose spinning threads fought numba's (decode 39 -> 9 tok/s); same result."""
    from blazr.backends.cpu import Backend

    be = Backend()
    packed = random_weight("Q4_0", 64, 256, rng)
    be.matmul(rng.standard_normal((1, 256)).astype(np.float32), packed)
    assert be._numba_pool
    for t, n, k in [(1, 1, 7), (3, 130, 256), (4, 33, 4096 + 256)]:
        w = rng.standard_normal((n, k)).astype(np.float32)
        x = rng.standard_normal((t, k)).astype(np.float32)
        got = be.matmul(x, w)
        want = x.astype(np.float64) @ w.astype(np.float64).T
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_f16_at_converts_every_half_exactly():
    """All 65536 half bit patterns, through the instruction (F16C, ARM) or the integer path (x86 without
    F16C: no runtime-library call, which numba's JIT may resolve to a null pointer)."""
    from blazr.quant.cpu_target import NATIVE_HALF

    @njit
    def convert(w):
        out = np.empty(w.size // 2, np.float32)
        for i in range(out.size):
            out[i] = f16_at(w, 2 * i)
        return out

    bits = np.arange(1 << 16, dtype=np.uint16)
    got, want = convert(bits.view(np.uint8)), bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), NATIVE_HALF
    assert np.isnan(got[nan]).all()
