"""Prefill matmul with int8 activations: many tokens times packed GGML rows, on a register-tile micro-kernel.

Why: a prompt of T tokens multiplies every weight T times. Decoding rows to float32 for BLAS sgemm made a
1B model's 128-token prefill compute-bound at ~45 G multiply-adds/s a core; `vpdpbusd` does 64 int8
multiply-adds per instruction (85 G/s a core in cpu_gemm_simd's tile, this CPU).

How, per call:
1. x (T, K) is rounded to int8 per 32 values (cpu_int8_dots.quantize_rows, as the decode kernels do), once.
2. Each parallel task unpacks its weight rows (cpu_unpack: one byte per weight, a float scale per 4 values,
   an offset per 16) into scratch that stays in L2, then runs gemm_tile over every (4 rows, 3 tokens) tile,
   token chunk by token chunk so the int8 activations it rereads stay in L2 as well. Q8_0's bytes are signed
   (-128..127): its rows take gemm_tile_signed (format_tile picks it), exact in int32 as the row dots are.
3. The offsets, in the same tile: out[t, r] -= sum_g mins[r, g] * dx[t, g / 2] * xs[t, g] over 16-value
   groups g, with xs the integer sums of the *quantized* x, so the offset and the scaled part see the same
   rounded x (exactly the dequantized weights times the dequantized activations, up to float32 rounding).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import call_address
from blazr.quant.cpu_blocks import NEUTRAL_TAG, dispatch_by_format
from blazr.quant.cpu_gemm_simd import (
    LANE_BYTES,
    ROWS,
    TOKENS,
    X_CHUNK_BYTES,
    gemm_tile,
    gemm_tile_signed,
    rows_per_task,
)
from blazr.quant.cpu_int8_dots import int8_task, quantize_block
from blazr.quant.cpu_unpack import SIGNED, UNPACKERS, unpack_row

AVAILABLE = gemm_tile is not None
FORMATS: frozenset[str] = frozenset(UNPACKERS) if AVAILABLE else frozenset()
# format_tile(tag, *gemm_tile's arguments): the tile for the format's unpacked bytes, chosen at compile time
format_tile = (
    dispatch_by_format({f: gemm_tile_signed if f in SIGNED else gemm_tile for f in UNPACKERS}, "format_tile")
    if AVAILABLE
    else None
)
_STEP = 64  # K is padded to a multiple of this (LANE_BYTES divides it)
_GROUP_STEP = 16  # and its 16-value groups to a multiple of this (LANE_BYTES / 4 divides it)


@njit(cache=True, nogil=True)
def _task(tag, blocks, xq, dx, xsum, out, start, stop, k):
    """out[:, start:stop] for rows start..stop of blocks; xq (Tp, Kp) int8, dx (Tp, Kp/32), xsum (Tp, G)."""
    tp, kp = xq.shape
    groups = xsum.shape[1]
    nrows = stop - start
    rp = (nrows + ROWS - 1) // ROWS * ROWS
    # Scratch (unpack_row fills a row's first K values), padding rows and columns zeroed: not whole arrays
    # of np.zeros, whose memset was a pass over the scratch as costly as a tenth of the call at a few tokens
    q = np.empty((rp, kp), dtype=np.uint8)  # (Rp, Kp) unpacked rows
    ws = np.empty((rp, kp // 4), dtype=np.float32)  # (Rp, Kp/4) scale per 4 values
    mins = np.empty((rp, groups), dtype=np.float32)  # (Rp, G) offset per 16 values
    for i in range(nrows):
        unpack_row(tag, blocks[start + i], q[i, :k], ws[i, : k // 4], mins[i, : k // 16])
        q[i, k:] = 0
        ws[i, k // 4 :] = 0
        mins[i, k // 16 :] = 0
    q[nrows:] = 0
    ws[nrows:] = 0
    mins[nrows:] = 0
    acc = np.empty((tp, rp), dtype=np.float32)  # (Tp, Rp)
    chunk = max(TOKENS, X_CHUNK_BYTES // kp // TOKENS * TOKENS)
    for t_start in range(0, tp, chunk):
        for r0 in range(0, rp, ROWS):
            for t0 in range(t_start, min(tp, t_start + chunk), TOKENS):
                format_tile(
                    tag, q, ws, mins, xq, dx, xsum, acc, r0, t0, kp // LANE_BYTES, groups * 4 // LANE_BYTES
                )
    for t in range(out.shape[0]):
        out[t, start:stop] = acc[t, :nrows]


@njit(cache=True, nogil=True)
def quantize_padded(x, tp, kp):
    """x (T, K) float32 -> xq (Tp, Kp) int8, dx (Tp, Kp/32) float32 and xsum (Tp, G) float32, the
    dequantized sums of x per 16 values (G: K/16 up to a whole gemm_tile step); padding is 0. Written straight
    into the padded arrays (an unpadded copy, then padded ones, took 4 of its 7 us at K = 896). Serial and
    outside the parallel function: numba's parfor pass rewrote padded copies wrongly inside it."""
    t, k = x.shape
    xq = np.zeros((tp, kp), dtype=np.int8)  # (Tp, Kp)
    dx = np.zeros((tp, kp // 32), dtype=np.float32)  # (Tp, Kp/32)
    groups = (kp // 16 + _GROUP_STEP - 1) // _GROUP_STEP * _GROUP_STEP
    xsum = np.zeros((tp, groups), dtype=np.float32)  # (Tp, G)
    for ti in range(t):
        for b in range(k // 32):
            d, s0, s1 = quantize_block(x[ti], xq[ti], 32 * b)
            dx[ti, b], xsum[ti, 2 * b], xsum[ti, 2 * b + 1] = d, d * np.float32(s0), d * np.float32(s1)
    return xq, dx, xsum


@njit(parallel=True, cache=True, nogil=True)
def _launch(task_fn, tag, x, blocks, out, rows_per_task):
    """The parallel GEMM (task_fn: _task's address for the format, tag the neutral one)."""
    t, k = x.shape
    tp, kp = (t + TOKENS - 1) // TOKENS * TOKENS, (k + _STEP - 1) // _STEP * _STEP
    xq, dx, xsum = quantize_padded(x, tp, kp)
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start = task * rows_per_task
        call_address(task_fn, (tag, blocks, xq, dx, xsum, out, start, min(n, start + rows_per_task), k))


# _task(tag, blocks, xq (Tp, Kp) int8, dx (Tp, Kp/32) f32, xsum (Tp, G) f32, out, start, stop, k)
_TASK = int8_task(_task, np.float32, 3)


def matmul_int8_gemm(
    x: np.ndarray, blocks: np.ndarray, tag: np.ndarray, out: np.ndarray, threads: int
) -> None:
    """out (T, N) = int8-rounded x (T, K) float32 @ dequantized(blocks (N, row_bytes)).T (`tag`: its format)."""
    if not AVAILABLE:
        raise RuntimeError("the int8 GEMM needs an x86 CPU with AVX2 (or VNNI)")
    # scratch per row: a byte per weight, a float scale per 4 and an offset per 16 (2.25 bytes per weight)
    per_task = rows_per_task(blocks.shape[0], 2.25 * x.shape[1], threads)
    _launch(_TASK.address(tag, blocks, out), NEUTRAL_TAG, x, blocks, out, per_task)
