"""Bidirectional attention over long sequences (Whisper's encoder: 1500 positions) as BLAS products with a
numba softmax between them.

The tiled numba kernel (cpu_dense_attention) computes scores a tile at a time; at 1500 x 1500 x 64 per head
OpenBLAS's batched GEMMs do the two products faster: a layer of Whisper tiny's encoder (6 heads) took 31 ms
this way against 37 ms tiled (AMD EPYC Zen 5, 2 threads). The softmax runs on the calling thread: numba's
pool woken between two OpenBLAS calls made both pools spin against each other (41 ms). Scores take
H x Lq x Lk floats (54 MB for tiny), which long sequences can afford and short ones do not need.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.backends.cpu_math import exp_neg

MIN_KEYS = 512  # shorter sequences stay on the tiled kernel
_buffers = threading.local()  # per thread: a scores buffer reused across calls


def takes(q_lens, kv_lens, causal, window, rel_bias) -> bool:
    """Whether attention_long takes this whole-sequence attention: long, well-formed sequences, where two BLAS
    products per head beat the tiled kernel (Whisper's encoder)."""
    return (
        not causal
        and window == 0
        and rel_bias is None
        and q_lens.shape == kv_lens.shape
        and bool(np.all(kv_lens >= MIN_KEYS))
        and bool(np.all(q_lens >= 0))
    )


def _scores_buffer(size: int) -> np.ndarray:
    """A float32 buffer of at least `size` values, kept between calls: allocating the 54 MB of a Whisper
    tiny layer's scores afresh each call cost more in page faults (~15 ms) than the GEMM that fills it."""
    buf = getattr(_buffers, "scores", None)
    if buf is None or buf.size < size:
        buf = _buffers.scores = np.empty(size, dtype=np.float32)
    return buf[:size]


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def softmax_rows(scores, scale):
    """In place: each row of scores (R, L) becomes softmax(scale * row); returns nothing."""
    for r in range(scores.shape[0]):
        row = scores[r]
        top = row[0]
        for j in range(row.shape[0]):
            top = max(top, row[j])
        total = np.float32(0.0)
        for j in range(row.shape[0]):
            e = exp_neg((row[j] - top) * scale)
            row[j] = e
            total += e
        inv = np.float32(1.0) / total
        for j in range(row.shape[0]):
            row[j] *= inv


def attention_long(q, k, v, q_lens, kv_lens, scale, out):
    """out (Tq, H, Dv) = softmax(scale * q k^T) v per packed sequence and head, every key visible.
    q (Tq, H, Dk), k (Tk, Hkv, Dk), v (Tk, Hkv, Dv) contiguous float32; q_lens, kv_lens (B,) int32.

    Per sequence: one batched GEMM for every head's scores, one numba softmax over all of them, one batched
    GEMM for the outputs."""
    h, hkv = q.shape[1], k.shape[1]
    group = h // hkv
    q0 = k0 = 0
    for b in range(q_lens.shape[0]):
        lq, lk = int(q_lens[b]), int(kv_lens[b])
        if lq == 0:  # a sequence with keys and no queries: nothing to write
            k0 += lk
            continue
        qs = q[q0 : q0 + lq].transpose(1, 0, 2).reshape(hkv, group * lq, -1)  # (Hkv, G * lq, Dk)
        ks = k[k0 : k0 + lk].transpose(1, 2, 0)  # (Hkv, Dk, lk)
        scores = _scores_buffer(hkv * group * lq * lk).reshape(hkv, group * lq, lk)
        np.matmul(qs, ks, out=scores)  # (Hkv, G * lq, lk)
        softmax_rows(scores.reshape(-1, lk), np.float32(scale))
        att = np.matmul(scores, v[k0 : k0 + lk].transpose(1, 0, 2))  # (Hkv, G * lq, Dv)
        out[q0 : q0 + lq] = att.reshape(h, lq, -1).transpose(1, 0, 2)
        q0, k0 = q0 + lq, k0 + lk
