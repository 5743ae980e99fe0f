"""Mixture-of-experts decode on int8 lane dots: every (token, expert) pair of a step in one parallel call.

A decode step routes each token to k experts; multiplying them one packed matmul each launched numba's thread
pool k times per projection and layer (a Qwen3-MoE-shaped model: 24 launches of ~40 us a layer, most of it the
launch). Here pair p's activation row dots the N rows of its expert, starting at weight row row0[p] of the
stacked experts' blocks (E * N, row_bytes), and the pool's tasks are (pair, row range) couples. Each cell is
the lane dot blazr.quant.cpu_int8_lanes computes, so the output equals the per-expert matmul bit for bit
(and so the int8 GEMM's, which the lanes match): the choice between the two is a speed choice only.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import call_address
from blazr.numba_threads import num_threads
from blazr.quant.cpu_blocks import NEUTRAL_TAG
from blazr.quant.cpu_int8_dots import int8_task
from blazr.quant.cpu_int8_gemm import quantize_padded
from blazr.quant.cpu_int8_lanes import FORMATS, LANES, ROWS, int8_lane_dot

__all__ = ["FORMATS", "matmul_experts_lanes", "matmul_quant_experts_lanes"]


@njit(cache=True, nogil=True)
def _pair_span(tag, blocks, xq, dx, xsum, out, i, j, base, start, stop):
    """out[i, start:stop] = x row j (int8: xq (Tp, Kp), dx, xsum) against rows base + start .. base + stop - 1."""
    acc = np.zeros((ROWS, LANES), dtype=np.float32)  # (ROWS, LANES) each row's accumulator
    mins = np.zeros((ROWS, xsum.shape[1]), dtype=np.float32)  # (ROWS, G) offsets; padding groups stay 0
    xq_j, dx_j, xsum_j, out_i = xq[j : j + 1], dx[j : j + 1], xsum[j : j + 1], out[i : i + 1]  # (1, ...) each
    for r in range(start, stop, ROWS):
        int8_lane_dot(
            tag, blocks[base + r : base + min(stop, r + ROWS)], xq_j, dx_j, xsum_j, acc, mins, out_i, r
        )


@njit(parallel=True, cache=True, nogil=True)
def _launch(span, tag, x, blocks, xrow, row0, out, rows_per_task):
    """Every pair's rows (span: _pair_span's address for the format, tag the neutral one)."""
    t, k = x.shape
    p, n = out.shape
    xq, dx, xsum = quantize_padded(x, t, (k + 63) // 64 * 64)  # each row rounded as the GEMM rounds it
    spans = (n + rows_per_task - 1) // rows_per_task
    for task in prange(p * spans):
        i, s = task // spans, task % spans
        start, stop = s * rows_per_task, min(n, (s + 1) * rows_per_task)
        call_address(span, (tag, blocks, xq, dx, xsum, out, i, xrow[i], row0[i], start, stop))


# _pair_span(tag, blocks, xq (Tp, Kp) int8, dx (Tp, Kp/32) f32, xsum (Tp, G) f32, out, i, j, base, start, stop)
_PAIR_SPAN = int8_task(_pair_span, np.float32, 5)


def matmul_experts_lanes(
    x: np.ndarray, blocks: np.ndarray, tag: np.ndarray, xrow: np.ndarray, row0: np.ndarray, n: int
) -> np.ndarray:
    """x (T, K) float32 activation rows; blocks (E * N, row_bytes) every expert's packed rows; pair p takes
    x row xrow[p] and the N rows of its expert from row0[p] (xrow, row0 (P,) int64) -> out (P, N) float32.
    A token's k pairs share its row of x, which is rounded to int8 once."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    pairs = len(row0)
    out = np.empty((pairs, n), dtype=np.float32)  # (P, N)
    # about 8 tasks per thread over all pairs, each at least ROWS rows
    per_task = max(ROWS, -(-n * pairs // (8 * num_threads())))
    xrow, row0 = (np.ascontiguousarray(a, dtype=np.int64) for a in (xrow, row0))
    span = _PAIR_SPAN.address(tag, blocks, out)
    _launch(span, NEUTRAL_TAG, x, blocks, xrow, row0, out, min(n, per_task))
    return out


def matmul_quant_experts_lanes(x: np.ndarray, w, flat: np.ndarray, k: int, out: np.ndarray) -> None:
    """out[t k + j] = token t's slot j (expert flat[t k + j]) through the stacked experts w (a QuantExperts),
    every pair in one call per part (gate, up); x (T, K) float32, flat (T k,), out (T k, N) float32."""
    from blazr.quant.cpu_blocks import format_tag

    # pairs in expert order, so that consecutive tasks read the same expert's rows (from cache)
    order = np.argsort(flat, kind="stable")  # (T k,)
    xrow = order // k  # (T k,) each pair's row of x
    expert = flat[order].astype(np.int64)  # (T k,) each pair's expert
    column = 0
    for i, part in enumerate(w.parts):
        n = w.part_rows(i)
        row0 = expert * n  # (T k,) first row of each pair's expert
        lanes = matmul_experts_lanes(x, part.blocks, format_tag(part.format), xrow, row0, n)  # (T k, n)
        out[order, column : column + n] = lanes
        column += n
