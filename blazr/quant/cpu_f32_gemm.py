"""Prompt matmul with exact float32 activations on numba's thread pool: packed rows decoded to float32 tiles,
then a register-blocked float32 tile (cpu_gemm_simd.gemm_tile_f32).

Why, when BLAS sgemm exists: in a model whose other prompt matmuls run the int8 GEMM on numba's pool, an
sgemm call woke OpenBLAS's pool, whose spinning threads then took the cores from numba's (and the other way
round). Q8_0 tensors (exact float activations by design) sit among the int8-GEMM ones in llama.cpp's
K-quant mixes: the 0.5B Q6_K shape is Q8_0 wherever a row is not a multiple of 256 long. Numba's decoded-row
dots ran those at 40 G multiply-adds/s (2 threads) against sgemm's 69; this tile keeps them on numba's pool
at sgemm's speed.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import TaskByAddress, c_array, call_address
from blazr.numba_copy import copy1, copy2
from blazr.quant.cpu_blocks import F16_TABLE, NEUTRAL_TAG, decode_row
from blazr.quant.cpu_gemm_simd import F32_STEP, ROWS, TOKENS, X_CHUNK_BYTES, gemm_tile_f32, rows_per_task


@njit(cache=True, nogil=True)
def _task(tag, blocks, f16, x, out, start, stop, k):
    """out[:, start:stop] = x (Tp, Kp) @ decode(blocks[start:stop]).T for the first out.shape[0] tokens."""
    tp, kp = x.shape
    nrows = stop - start
    rp = (nrows + ROWS - 1) // ROWS * ROWS
    w = np.zeros((rp, kp), dtype=np.float32)  # (Rp, Kp) decoded rows; padding rows and columns stay 0
    for i in range(nrows):
        decode_row(tag, blocks[start + i], f16, w[i, :k])
    acc = np.empty((tp, rp), dtype=np.float32)  # (Tp, Rp)
    chunk = max(TOKENS, X_CHUNK_BYTES // (4 * kp) // TOKENS * TOKENS)
    for t_start in range(0, tp, chunk):
        for r0 in range(0, rp, ROWS):
            for t0 in range(t_start, min(tp, t_start + chunk), TOKENS):
                gemm_tile_f32(w, x, acc, r0, t0, kp // F32_STEP)
    for t in range(out.shape[0]):
        copy1(out[t, start:stop], acc[t, :nrows])


@njit(parallel=True, cache=True, nogil=True)
def _launch(task_fn, tag, x, blocks, f16, out, rows_per_task):
    """The parallel GEMM (task_fn: _task's address for the format, tag the neutral one)."""
    t, k = x.shape
    tp, kp = (t + TOKENS - 1) // TOKENS * TOKENS, (k + F32_STEP - 1) // F32_STEP * F32_STEP
    xp = np.zeros((tp, kp), dtype=np.float32)  # (Tp, Kp) x padded with zero tokens and values
    copy2(xp, x)  # xp[:t, :k] = x
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start = task * rows_per_task
        call_address(task_fn, (tag, blocks, f16, xp, out, start, min(n, start + rows_per_task), k))


# _task(tag, blocks, f16, xp (Tp, Kp) f32, out, start, stop, k)
_TASK = TaskByAddress(
    _task,
    lambda tag, blocks, f16, out: (
        tag,
        blocks,
        f16,
        c_array(np.float32, 2),
        out,
        types.int64,
        types.int64,
        types.int64,
    ),
    NEUTRAL_TAG,
)


def matmul_f32_gemm(
    x: np.ndarray, blocks: np.ndarray, tag: np.ndarray, out: np.ndarray, threads: int
) -> None:
    """out (T, N) = x (T, K) float32 @ decoded(blocks (N, row_bytes)).T (`tag`: its format)."""
    per_task = rows_per_task(blocks.shape[0], 4 * x.shape[1], threads)
    _launch(_TASK.address(tag, blocks, F16_TABLE, out), NEUTRAL_TAG, x, blocks, F16_TABLE, out, per_task)
