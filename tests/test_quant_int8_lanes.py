"""The batch-invariant decode kernels (blazr.quant.cpu_int8_lanes): a token's int8 matmul output is the same
float32 number, bit for bit, whether the lane dots compute it (few tokens: a decode step, a short prompt
tail) or the int8 GEMM (a prompt, a batch of 8 or more), and whatever other tokens share the call.

The GEMM itself is held to the float64 reference in tests/test_quant_int8_gemm.py; equality with it carries
that accuracy over. Rerun by CI at the other ISA levels (16 lanes with AVX-512, 8 with AVX2 only)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from blazr.quant import cpu_kernels  # noqa: E402
from blazr.quant.cpu_blocks import format_tag  # noqa: E402
from blazr.quant.cpu_int8_gemm import matmul_int8_gemm  # noqa: E402
from blazr.quant.cpu_int8_lanes import AVAILABLE, FORMATS, LANE_DOTS, ROWS  # noqa: E402
from blazr.quant.cpu_lane_matmul import matmul_int8_lanes  # noqa: E402
from tests.test_quant_int8 import random_weight  # noqa: E402

pytestmark = [
    pytest.mark.isa,
    pytest.mark.skipif(
        not AVAILABLE, reason="the lane dots run where the int8 GEMM does (x86 with VNNI or AVX2)"
    ),
]


def lanes(x: np.ndarray, w) -> np.ndarray:
    out = np.empty((x.shape[0], w.shape[0]), np.float32)  # (T, N)
    matmul_int8_lanes(x, w.blocks, format_tag(w.format), out, 5)
    return out


def gemm(x: np.ndarray, w) -> np.ndarray:
    out = np.empty((x.shape[0], w.shape[0]), np.float32)  # (T, N)
    matmul_int8_gemm(x, w.blocks, format_tag(w.format), out, 2)
    return out


def activations(rng, t: int, k: int) -> np.ndarray:
    """Rows of very different scales (the int8 rounding is per 32 values), a zero row and a row of one spike."""
    x = rng.standard_normal((t, k)) * rng.uniform(0.05, 20.0, (t, 1))
    x[t // 2] = 0.0
    x[-1, :] = 0.0
    x[-1, k // 3] = 7.5
    return x.astype(np.float32)


def test_every_int8_format_has_a_lane_dot():
    assert set(LANE_DOTS) == set(cpu_kernels.INT8_FORMATS) == set(FORMATS)


# K: whole 64-value steps, an odd number of 32-value blocks (a half step), K-quant super-blocks (2.5 steps of
# 128 for the 640 of Gemma 3 270M take Q5_0 there), a long row; N: a ragged last group of ROWS rows
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("k", [256, 96, 640, 4096 + 256])
def test_lane_dots_equal_the_gemm_bit_for_bit(fmt, k, rng):
    w = random_weight(fmt, 2 * ROWS + 3, k, rng)
    x = activations(rng, 11, w.shape[1])  # (11, K)
    batch = gemm(x, w)  # (11, N) every token inside an 11-token GEMM
    for t in (1, 3, 7):
        np.testing.assert_array_equal(lanes(x[:t], w), batch[:t], err_msg=f"{fmt} K={k}, {t} tokens")
    np.testing.assert_array_equal(lanes(x[-1:], w), batch[-1:], err_msg=f"{fmt} K={k}, the spike row")


@pytest.mark.parametrize("fmt", ["Q4_1", "Q4_K", "Q8_0"])
def test_a_token_gives_the_same_output_in_any_batch(fmt, rng):
    """cpu_kernels.matmul, the model's entry: one token alone and inside batches of every size 2..20 (both
    kernels, random neighbours and positions) gives the same row."""
    w = random_weight(fmt, 37, 512, rng)
    x = activations(rng, 1, 512)  # (1, K)
    alone = cpu_kernels.matmul(x, w)  # (1, N)
    for size in range(2, 21):
        others = activations(rng, size - 1, 512)
        at = int(rng.integers(0, size))
        batch = np.concatenate([others[:at], x, others[at:]])  # (size, K)
        np.testing.assert_array_equal(cpu_kernels.matmul(batch, w)[at], alone[0], err_msg=f"batch of {size}")


def test_the_cpu_backends_decode_matmul_keeps_its_output_and_follows_the_dtype(rng):
    """Backend.matmul decides a packed weight's decode kernel at its first int8 call (cpu_lane_matmul.LaneMatmul)
    and takes it from then on: the same bits as cpu_kernels.matmul for contiguous and strided x, none once
    the activations turn float32 (--dtype f32)."""
    from blazr.backends.cpu import Backend

    be = Backend()
    w = random_weight("Q4_1", 37, 512, rng)
    x = activations(rng, 3, 1024)[:, ::2]  # (3, 512) a strided view
    want = cpu_kernels.matmul(x, w)  # (3, N)
    np.testing.assert_array_equal(be.matmul(x, w), want)  # the first call chooses
    assert be._lane_matmuls.get(w) is not None
    np.testing.assert_array_equal(be.matmul(np.ascontiguousarray(x), w), want)  # the chosen kernel
    np.testing.assert_array_equal(be.matmul(x, w), want)
    be.set_int8_activations(False)
    assert be._lane_matmuls.get(w) is None
    np.testing.assert_array_equal(be.matmul(x, w), cpu_kernels.matmul(x, w, int8=False))
    assert not np.array_equal(be.matmul(x, w), want)  # float32 activations round otherwise


@pytest.mark.parametrize("formats", [("Q5_0", "Q8_0"), ("Q4_K", "Q6_K", "Q4_K"), ("Q4_1", "Q5_1")])
def test_a_stack_of_formats_in_one_launch_gives_each_parts_output(formats, rng):
    """Backend.matmul on packed parts of several formats stacked by rows (a Q4_K_M file's fused q/k/v): after
    the first call, one launch for every part (cpu_lane_matmul.StackedLaneMatmul), the same bits as each
    part's own matmul side by side, for 1 to 7 tokens and ragged part sizes."""
    from blazr.backends.cpu import Backend
    from blazr.quant import stack_rows
    from blazr.quant.cpu_lane_matmul import StackedLaneMatmul

    be = Backend()
    parts = [random_weight(fmt, n, 512, rng) for fmt, n in zip(formats, (37, 8, 21), strict=False)]
    w = stack_rows(parts)
    x = activations(rng, 7, 512)  # (7, K)
    for t in (1, 3, 7, 1):
        want = np.concatenate([cpu_kernels.matmul(x[:t], p) for p in parts], axis=1)  # (t, N)
        np.testing.assert_array_equal(be.matmul(x[:t], w), want, err_msg=f"{formats}, {t} tokens")
    assert isinstance(be._lane_matmuls.get(w), StackedLaneMatmul)
