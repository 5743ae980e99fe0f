"""numba dot products that read GGML blocks directly: one packed row (row_bytes,) uint8 times a few
activation rows x (T, K) float32, for the decode matvec.

Why not decode the row first (blazr.quant.cpu_blocks) and then dot it: for one token, writing the decoded
row to scratch and reading it back costs as much as the dot itself, and applying each block's scale to all
of its values does too. Here the quantized integers are converted and multiplied straight into a per-block
(or per-group) sum, which is scaled once; a format's minimum term uses the precomputed sum of x over each
32-value block (xsum (T, K/32)) instead of one multiply-add per value. The arithmetic is f32 throughout, so
the result equals the dequantized product up to f32 summation order.

`row_dot(tag, row, f16, x, xsum, out, r)` writes out[t, r] for every token t; `tag` is
cpu_blocks.format_tag(fmt), so each format compiles only its own dot (as cpu_blocks.decode_row).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.quant.cpu_blocks import _k_scale_min, dispatch_by_format


@njit(inline="always")
def _half(row, o, f16):
    return f16[np.int32(row[o]) | (np.int32(row[o + 1]) << 8)]


# ---- Q4_1 ------------------------------------------------------------------------------------
# Rows and activations are viewed as (block, field, lane) arrays and the lane loops run to a bound read from
# a shape, as in cpu_blocks: LLVM vectorises those; flat `base + j` indexing stays scalar.


@njit(cache=True, fastmath=True, nogil=True)
def _dot_q4_1(row, f16, x, xsum, out, r):
    """Q4_1: d f16, m f16, qs[16] (value j in the low nibble of byte j, j + 16 in its high); v = d q + m."""
    nb = x.shape[1] // 32
    blk = row.reshape(nb, 20)
    for t in range(x.shape[0]):
        xb = x[t].reshape(nb, 2, 16)  # (block, nibble, lane)
        acc = np.float32(0.0)
        for b in range(nb):
            qs = blk[b, 4:20]  # (16,)
            x0, x1 = xb[b, 0], xb[b, 1]  # (16,) each
            s = np.float32(0.0)
            for j in range(qs.size):
                q = np.int32(qs[j])
                s += np.float32(q & 15) * x0[j] + np.float32(q >> 4) * x1[j]
            acc += _half(blk[b], 0, f16) * s + _half(blk[b], 2, f16) * xsum[t, b]
        out[t, r] = acc


# ---- 256-value K-quant super-blocks ---------------------------------------------------------------------


@njit(inline="always")  # into each format's wrapper, where the flag is a constant
def _dot_q45_k(row, f16, x, xsum, out, r, five):
    """Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (d, dmin, scales[12], qh[32], qs[128]): chunk c of 32
    bytes holds group 2c in its low nibbles and 2c + 1 in its high; v = d sc q - dmin m per group."""
    nb = x.shape[1] // 256
    blk = row.reshape(nb, row.size // nb)  # (nb, 144 | 176)
    qo = 48 if five else 16
    for t in range(x.shape[0]):
        xb = x[t].reshape(nb, 4, 2, 32)  # (block, chunk, nibble, lane)
        acc = np.float32(0.0)
        for b in range(nb):
            d, dmin = _half(blk[b], 0, f16), _half(blk[b], 2, f16)
            qh = blk[b, 16:48]  # (32,) Q5_K: bit g of qh[lane] is bit 4 of group g
            for c in range(4):
                qs = blk[b, qo + 32 * c : qo + 32 * c + 32]  # (32,)
                x0, x1 = xb[b, c, 0], xb[b, c, 1]  # (32,) each
                s_lo = np.float32(0.0)
                s_hi = np.float32(0.0)
                for j in range(qs.size):
                    q = np.int32(qs[j])
                    lo, hi = q & 15, q >> 4
                    if five:
                        lo |= ((np.int32(qh[j]) >> (2 * c)) & 1) << 4
                        hi |= ((np.int32(qh[j]) >> (2 * c + 1)) & 1) << 4
                    s_lo += np.float32(lo) * x0[j]
                    s_hi += np.float32(hi) * x1[j]
                sc0, m0 = _k_scale_min(blk, b, 2 * c)  # six-bit ints
                sc1, m1 = _k_scale_min(blk, b, 2 * c + 1)
                g = b * 8 + 2 * c
                acc += d * (np.float32(sc0) * s_lo + np.float32(sc1) * s_hi) - dmin * (
                    np.float32(m0) * xsum[t, g] + np.float32(m1) * xsum[t, g + 1]
                )
        out[t, r] = acc


@njit(cache=True, fastmath=True, nogil=True)
def _dot_q6_k(row, f16, x, xsum, out, r):
    """Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d f16; 16 groups of 16, q - 32.
    Lane l of half h reads ql[64h + l] (quarters 0 and 2), ql[64h + 32 + l] (1 and 3) and qh[32h + l]."""
    nb = x.shape[1] // 256
    blk = row.reshape(nb, 210)
    for t in range(x.shape[0]):
        xb = x[t].reshape(nb, 2, 4, 2, 16)  # (block, half, quarter, 16-group, lane)
        acc = np.float32(0.0)
        for b in range(nb):
            d = _half(blk[b], 208, f16)
            for h in range(2):
                for s in range(2):  # lanes 16 s .. 16 s + 15 share one scale per quarter
                    ql0 = blk[b, 64 * h + 16 * s : 64 * h + 16 * s + 16]  # (16,)
                    ql1 = blk[b, 64 * h + 32 + 16 * s : 64 * h + 48 + 16 * s]  # (16,)
                    qh = blk[b, 128 + 32 * h + 16 * s : 144 + 32 * h + 16 * s]  # (16,)
                    xa, xc, xe, xg = xb[b, h, 0, s], xb[b, h, 1, s], xb[b, h, 2, s], xb[b, h, 3, s]
                    s1 = s2 = s3 = s4 = np.float32(0.0)
                    for j in range(qh.size):
                        a, c, e = np.int32(ql0[j]), np.int32(ql1[j]), np.int32(qh[j])
                        s1 += np.float32(((a & 15) | ((e & 3) << 4)) - 32) * xa[j]
                        s2 += np.float32(((c & 15) | (((e >> 2) & 3) << 4)) - 32) * xc[j]
                        s3 += np.float32(((a >> 4) | (((e >> 4) & 3) << 4)) - 32) * xe[j]
                        s4 += np.float32(((c >> 4) | (((e >> 6) & 3) << 4)) - 32) * xg[j]
                    so = 192 + 8 * h + s
                    sc1 = np.float32((np.int32(blk[b, so]) ^ 128) - 128)
                    sc2 = np.float32((np.int32(blk[b, so + 2]) ^ 128) - 128)
                    sc3 = np.float32((np.int32(blk[b, so + 4]) ^ 128) - 128)
                    sc4 = np.float32((np.int32(blk[b, so + 6]) ^ 128) - 128)
                    acc += d * (sc1 * s1 + sc2 * s2 + sc3 * s3 + sc4 * s4)
        out[t, r] = acc


# ---- one dot per format, picked at compile time -----------------------------------------------------------


@njit(cache=True, fastmath=True, nogil=True)
def _dot_q4_k(row, f16, x, xsum, out, r):
    _dot_q45_k(row, f16, x, xsum, out, r, False)


@njit(cache=True, fastmath=True, nogil=True)
def _dot_q5_k(row, f16, x, xsum, out, r):
    _dot_q45_k(row, f16, x, xsum, out, r, True)


# type name -> fn(row (row_bytes,) uint8, f16 table, x (T, K), xsum (T, K/32), out (T, N), r)
# Only where it measured faster than decode-then-dot for one token (2048 x 2048, one thread, CPU time):
# Q4_1 1.1x, Q4_K 1.2x, Q5_K 1.1x, Q6_K 1.4x; Q4_0 1.0x, Q8_0 0.9x and Q5_0/Q5_1 0.7x kept the decoder path,
# and from 3 tokens on decoding each row once wins for every format (0.3-0.6x).
DOTS: dict = {"Q4_1": _dot_q4_1, "Q4_K": _dot_q4_k, "Q5_K": _dot_q5_k, "Q6_K": _dot_q6_k}


# row_dot(tag, row, f16, x (T, K), xsum (T, K/32), out (T, N), r): out[:, r] = x @ the dequantized row
row_dot = dispatch_by_format(DOTS, "row_dot")
