"""Decode matvec with int8 activations: each packed GGML row times a few activation rows quantized to int8,
with integer SIMD dot products (blazr.quant.cpu_simd), as llama.cpp does on CPUs.

Why: converting every 4-8 bit weight to f32 caps the float dots (blazr.quant.cpu_dots) at a few G weights
per second per core; an 8-bit dot instruction (vpdpbusd, sdot) multiplies 32 weights in one or two
instructions. The cost is accuracy: x is rounded to int8 with one f32 scale per 32 values
(xq = round(x / dx), dx = absmax / 127), a relative error of about 1/(127 sqrt(12)) * absmax / rms(x) per
value. The integer part is exact: per 32- (or 16-) value group, the int32 dot of the weight integers and xq
is scaled once by (weight scale * dx); offsets and minimums use the int32 sums of xq per 16 values (xs).

`int8_row_dot(tag, row, xq, dx, xs, out, r)` writes out[t, r] for every token t; `tag` is
cpu_blocks.format_tag(fmt), so each format compiles only its own dot (as cpu_dots.row_dot).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import TaskByAddress, c_array, call_address
from blazr.numba_bits import bits_from_float32, float32_from_bits
from blazr.quant.cpu_blocks import NEUTRAL_TAG, dispatch_by_format
from blazr.quant.cpu_simd import (
    dot_i8_biased,
    dot_q2_k,
    dot_q3_k,
    dot_q4,
    dot_q4_k,
    dot_q5,
    dot_q5_k,
    dot_q6_k,
    f16_at,
    prefetch,
)

# Each kernel asks for the cache lines this many bytes ahead of the block it reads. Decode streams every weight
# from DRAM once per token, and the hardware prefetcher alone left the loop waiting on memory: (8192, 2048)
# Q4_0 weights, 8 matrices in turn, one thread: 3.8 ms a matrix without, 1.2-1.3 ms with 4-16 KB ahead.
PREFETCH_BYTES = 8192

# ---- activations ---------------------------------------------------------------------------------------


@njit(inline="always")
def quantize_block(v, q, o):
    """v[o:o + 32] (float32) -> q[o:o + 32] int8, rounded to the block's absmax (-127..127); returns (dx, s0, s1):
    the scale amax / 127 and the sums of the two 16-value halves of q. A block holding a NaN or inf gets
    dx = NaN and q = 0, so the products it enters come out NaN as in the f32 path."""
    # the absmax as the largest magnitude's bits (integer order is float order for magnitudes, and NaN / inf
    # sit above every finite one): an integer max vectorises where the float max and the NaN test took a
    # scalar loop (quantize_padded at K = 4864, called from Python: 15.3 -> 11.8 us, Zen 1 class EPYC)
    top = np.uint32(0)
    for j in range(32):
        top = max(top, np.uint32(bits_from_float32(v[o + j]) & np.uint32(0x7FFFFFFF)))
    if top >= np.uint32(0x7F800000):
        for j in range(32):
            q[o + j] = 0
        return np.float32(np.nan), np.int32(0), np.int32(0)
    amax = float32_from_bits(top)
    inv = np.float32(127.0) / amax if amax > 0 else np.float32(0.0)
    s0 = s1 = np.int32(0)
    for j in range(16):
        q0 = np.int8(np.rint(v[o + j] * inv))
        q1 = np.int8(np.rint(v[o + j + 16] * inv))
        q[o + j], q[o + j + 16] = q0, q1
        s0 += np.int32(q0)
        s1 += np.int32(q1)
    return amax / np.float32(127.0), s0, s1


@njit(cache=True, nogil=True)
def quantize_rows(x, xq, dx, xs):
    """x (T, K) float32 -> xq (T, K) int8, dx (T, K/32) float32 scales, xs (T, K/16) int32 sums of xq, block by
    block (quantize_block)."""
    for t in range(x.shape[0]):
        for b in range(x.shape[1] // 32):
            dx[t, b], xs[t, 2 * b], xs[t, 2 * b + 1] = quantize_block(x[t], xq[t], 32 * b)


@njit(inline="always")
def _prefetch_ahead(row, o, nbytes):
    """Prefetch the lines of the nbytes-byte block that sits PREFETCH_BYTES after the one at o."""
    for line in range(0, nbytes, 64):
        prefetch(row, o + PREFETCH_BYTES + line)


# ---- 32-value blocks ---------------------------------------------------------------------------------
# No format kernel here is cached on disk by itself: numba keys a cached function on its own file only, so an
# edit of cpu_simd would keep their old code. They are compiled into matmul_int8, whose format tag carries a
# hash of every cpu_*.py file (cpu_blocks.format_tag).
# Block b covers xq[32 b : 32 b + 32], scale dx[b], sums xs[2 b] + xs[2 b + 1].


@njit(inline="always")  # into each wrapper, where the layout arguments are constants
def _q4_q5(row, xq, dx, xs, out, r, block_bytes, five, has_min):
    """Q4_0 (d, qs[16]; q - 8), Q4_1 (d, m, qs[16]), Q5_0 (d, qh[4], qs[16]; q - 16), Q5_1 (d, m, qh, qs)."""
    qh_at = 4 if has_min else 2
    qs_at = qh_at + (4 if five else 0)
    offset = 0 if has_min else (16 if five else 8)
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 32):
            o = b * block_bytes
            _prefetch_ahead(row, o, block_bytes)
            if five:
                dot = dot_q5(row, o + qs_at, o + qh_at, x, 32 * b)
            else:
                dot = dot_q4(row, o + qs_at, x, 32 * b)
            xsum = xs[t, 2 * b] + xs[t, 2 * b + 1]
            acc += f16_at(row, o) * dx[t, b] * np.float32(dot - offset * xsum)
            if has_min:
                acc += f16_at(row, o + 2) * dx[t, b] * np.float32(xsum)
        out[t, r] = acc


@njit(fastmath=True, nogil=True)
def _q4_0(row, xq, dx, xs, out, r):
    _q4_q5(row, xq, dx, xs, out, r, 18, False, False)


@njit(fastmath=True, nogil=True)
def _q4_1(row, xq, dx, xs, out, r):
    _q4_q5(row, xq, dx, xs, out, r, 20, False, True)


@njit(fastmath=True, nogil=True)
def _q5_0(row, xq, dx, xs, out, r):
    _q4_q5(row, xq, dx, xs, out, r, 22, True, False)


@njit(fastmath=True, nogil=True)
def _q5_1(row, xq, dx, xs, out, r):
    _q4_q5(row, xq, dx, xs, out, r, 24, True, True)


@njit(fastmath=True, nogil=True)
def _i4z(row, xq, dx, xs, out, r):
    """I4Z, blazr's AWQ/GPTQ int4 (d f16, z u16, qs[16] as Q4_0; v = (q - z) d): blazr.quant.int4."""
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 32):
            o = 20 * b
            _prefetch_ahead(row, o, 20)
            z = np.int32(row[o + 2]) | (np.int32(row[o + 3]) << 8)
            dot = dot_q4(row, o + 4, x, 32 * b) - z * (xs[t, 2 * b] + xs[t, 2 * b + 1])
            acc += f16_at(row, o) * dx[t, b] * np.float32(dot)
        out[t, r] = acc


@njit(fastmath=True, nogil=True)
def _q8_0(row, xq, dx, xs, out, r):
    """Q8_0: d f16, qs[32] int8. The weights are dotted with their sign bit flipped (q + 128, unsigned)."""
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 32):
            o = 34 * b
            _prefetch_ahead(row, o, 34)
            dot = dot_i8_biased(row, o + 2, x, 32 * b) - 128 * (xs[t, 2 * b] + xs[t, 2 * b + 1])
            acc += f16_at(row, o) * dx[t, b] * np.float32(dot)
        out[t, r] = acc


# ---- 256-value K-quant super-blocks -------------------------------------------------------------------


@njit(inline="always")
def _k_scale_min(row, o, g):
    """Q4_K/Q5_K six-bit (scale, min) of group g from the 12 bytes at o + 4 of one super-block."""
    if g < 4:
        return np.int32(row[o + 4 + g]) & 63, np.int32(row[o + 8 + g]) & 63
    sc = (np.int32(row[o + 8 + g]) & 15) | ((np.int32(row[o + g]) >> 6) << 4)
    mn = (np.int32(row[o + 8 + g]) >> 4) | ((np.int32(row[o + 4 + g]) >> 6) << 4)
    return sc, mn


@njit(inline="always")
def _q45_k_chunk(row, o, c, x, dx, xs, t, g, five):
    """(dx sc dot, dx m sum(xq)) summed over the two groups of chunk c; g = the chunk's first 32-block."""
    if five:
        dot0, dot1 = dot_q5_k(row, o + 48 + 32 * c, o + 16, c, x, 32 * g)
    else:
        dot0, dot1 = dot_q4_k(row, o + 16 + 32 * c, x, 32 * g)
    sc0, m0 = _k_scale_min(row, o, 2 * c)
    sc1, m1 = _k_scale_min(row, o, 2 * c + 1)
    scaled = dx[t, g] * np.float32(sc0 * dot0) + dx[t, g + 1] * np.float32(sc1 * dot1)
    xsum0, xsum1 = xs[t, 2 * g] + xs[t, 2 * g + 1], xs[t, 2 * g + 2] + xs[t, 2 * g + 3]
    return scaled, dx[t, g] * np.float32(m0 * xsum0) + dx[t, g + 1] * np.float32(m1 * xsum1)


@njit(inline="always")  # into each format's wrapper, where the flag is a constant
def _q45_k(row, xq, dx, xs, out, r, five):
    """Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (d, dmin, scales[12], qh[32], qs[128]): chunk c of 32
    bytes holds group 2c (x values 64c..) in its low nibbles and 2c + 1 (64c + 32..) in its high ones;
    v = d sc q - dmin m per group. The chunks are spelled out, not looped: a constant c makes Q5_K's
    bit shifts constant (x86 has no per-byte variable shift; the loop measured 1.4x slower)."""
    block_bytes = 176 if five else 144
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 256):
            o, g = b * block_bytes, 8 * b
            _prefetch_ahead(row, o, block_bytes)
            s0, m0 = _q45_k_chunk(row, o, 0, x, dx, xs, t, g, five)
            s1, m1 = _q45_k_chunk(row, o, 1, x, dx, xs, t, g + 2, five)
            s2, m2 = _q45_k_chunk(row, o, 2, x, dx, xs, t, g + 4, five)
            s3, m3 = _q45_k_chunk(row, o, 3, x, dx, xs, t, g + 6, five)
            acc += f16_at(row, o) * (s0 + s1 + s2 + s3) - f16_at(row, o + 2) * (m0 + m1 + m2 + m3)
        out[t, r] = acc


@njit(fastmath=True, nogil=True)
def _q4_k(row, xq, dx, xs, out, r):
    _q45_k(row, xq, dx, xs, out, r, False)


@njit(fastmath=True, nogil=True)
def _q5_k(row, xq, dx, xs, out, r):
    _q45_k(row, xq, dx, xs, out, r, True)


@njit(inline="always")
def _q2_k_field(row, o, h, f, x, dx, xs, t, b):
    """(dx sum sc dot, dx sum m sum(xq)) of 2-bit field f of half h: x values 128h + 32f .., read from
    qs[32h + j] >> 2f; its two 16-value groups have the scale bytes 8h + 2f and 8h + 2f + 1."""
    g = 8 * b + 4 * h + f  # 32-value block of x
    dot0, dot1 = dot_q2_k(row, o + 16 + 32 * h, 2 * f, x, 32 * g)
    sc0, sc1 = np.int32(row[o + 8 * h + 2 * f]), np.int32(row[o + 8 * h + 2 * f + 1])
    scaled = dx[t, g] * np.float32((sc0 & 15) * dot0 + (sc1 & 15) * dot1)
    return scaled, dx[t, g] * np.float32((sc0 >> 4) * xs[t, 2 * g] + (sc1 >> 4) * xs[t, 2 * g + 1])


@njit(fastmath=True, nogil=True)
def _q2_k(row, xq, dx, xs, out, r):
    """Q2_K: scales[16] (scale | min << 4 per 16 values), qs[64] (four 2-bit fields per byte), d, dmin;
    v = d sc q - dmin m. Fields are spelled out so every shift is a constant (see _q45_k)."""
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 256):
            o = 84 * b
            _prefetch_ahead(row, o, 84)
            scaled = np.float32(0.0)
            mins = np.float32(0.0)
            for h in range(2):
                s, m = _q2_k_field(row, o, h, 0, x, dx, xs, t, b)
                scaled, mins = scaled + s, mins + m
                s, m = _q2_k_field(row, o, h, 1, x, dx, xs, t, b)
                scaled, mins = scaled + s, mins + m
                s, m = _q2_k_field(row, o, h, 2, x, dx, xs, t, b)
                scaled, mins = scaled + s, mins + m
                s, m = _q2_k_field(row, o, h, 3, x, dx, xs, t, b)
                scaled, mins = scaled + s, mins + m
            acc += f16_at(row, o + 80) * scaled - f16_at(row, o + 82) * mins
        out[t, r] = acc


@njit(inline="always")
def _q3_k_scale(row, o, s):
    """Q3_K six-bit scale s (signed, -32..31) from the 12 bytes at o + 96 of one super-block."""
    low = (np.int32(row[o + 96 + s % 8]) >> (4 * (s // 8))) & 15
    high = (np.int32(row[o + 104 + s % 4]) >> (2 * (s // 4))) & 3
    return (low | (high << 4)) - 32


@njit(inline="always")
def _q3_k_field(row, o, h, f, x, dx, xs, t, b):
    """dx * the exact integer sum of field f of half h: x values 128h + 32f .., low bits qs[32h + j] >> 2f,
    high bit h*4 + f of hmask[j]; two 16-value groups of scale * (dot - 4 sum), scales 8h + 2f (+ 1)."""
    g = 8 * b + 4 * h + f  # 32-value block of x
    dot0, dot1 = dot_q3_k(row, o + 32 + 32 * h, 2 * f, o, 4 * h + f, x, 32 * g)
    sc0, sc1 = _q3_k_scale(row, o, 8 * h + 2 * f), _q3_k_scale(row, o, 8 * h + 2 * f + 1)
    return dx[t, g] * np.float32(sc0 * (dot0 - 4 * xs[t, 2 * g]) + sc1 * (dot1 - 4 * xs[t, 2 * g + 1]))


@njit(fastmath=True, nogil=True)
def _q3_k(row, xq, dx, xs, out, r):
    """Q3_K: hmask[32] (bit 3), qs[64] (bits 1-2, four fields per byte), scales[12] (6-bit, -32), d;
    v = d sc (q - 4) per 16 values. Fields are spelled out so every shift is a constant (see _q45_k)."""
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 256):
            o = 110 * b
            _prefetch_ahead(row, o, 110)
            scaled = np.float32(0.0)
            for h in range(2):
                scaled += _q3_k_field(row, o, h, 0, x, dx, xs, t, b)
                scaled += _q3_k_field(row, o, h, 1, x, dx, xs, t, b)
                scaled += _q3_k_field(row, o, h, 2, x, dx, xs, t, b)
                scaled += _q3_k_field(row, o, h, 3, x, dx, xs, t, b)
            acc += f16_at(row, o + 108) * scaled
        out[t, r] = acc


@njit(inline="always")
def _q6_k_quarter(row, o, h, q, x, dx, xs, t, b):
    """dx * the exact integer sum of quarter q of half h: two 16-value groups of scale * (dot - 32 sum)."""
    g = 8 * b + 4 * h + q  # 32-value block of x
    ql_at, qh_at = o + 64 * h + 32 * (q & 1), o + 128 + 32 * h
    dot0, dot1 = dot_q6_k(row, ql_at, qh_at, 4 * (q >> 1), 2 * q, x, 32 * g)
    sc0 = (np.int32(row[o + 192 + 8 * h + 2 * q]) ^ 128) - 128
    sc1 = (np.int32(row[o + 193 + 8 * h + 2 * q]) ^ 128) - 128
    return dx[t, g] * np.float32(sc0 * (dot0 - 32 * xs[t, 2 * g]) + sc1 * (dot1 - 32 * xs[t, 2 * g + 1]))


@njit(fastmath=True, nogil=True)
def _q6_k(row, xq, dx, xs, out, r):
    """Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d f16; 16 groups of 16, q - 32.
    Quarter q of half h (x values 128h + 32q ..) reads ql[64h + 32 (q & 1) + j] >> 4 (q >> 1) and
    qh[32h + j] >> 2q; its two 16-value groups have scales 8h + 2q and 8h + 2q + 1. Quarters are spelled
    out so every shift is a constant (see _q45_k)."""
    for t in range(xq.shape[0]):
        x = xq[t]  # (K,)
        acc = np.float32(0.0)
        for b in range(xq.shape[1] // 256):
            o = 210 * b
            _prefetch_ahead(row, o, 210)
            scaled = np.float32(0.0)
            for h in range(2):
                scaled += _q6_k_quarter(row, o, h, 0, x, dx, xs, t, b)
                scaled += _q6_k_quarter(row, o, h, 1, x, dx, xs, t, b)
                scaled += _q6_k_quarter(row, o, h, 2, x, dx, xs, t, b)
                scaled += _q6_k_quarter(row, o, h, 3, x, dx, xs, t, b)
            acc += f16_at(row, o + 208) * scaled
        out[t, r] = acc


# ---- one dot per format, picked at compile time; the parallel matvec ------------------------------------

# type name -> fn(row (row_bytes,) uint8, xq (T, K) int8, dx (T, K/32) f32, xs (T, K/16) int32, out, r)
INT8_DOTS: dict = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
    "I4Z": _i4z,
}  # fmt: skip


# int8_row_dot(tag, row, xq, dx, xs, out, r): out[:, r] = dequantized xq (T, K) @ the dequantized row
int8_row_dot = dispatch_by_format(INT8_DOTS, "int8_row_dot")


@njit(cache=True, nogil=True)
def _span(tag, blocks, xq, dx, xs, out, start, stop):
    for r in range(start, stop):
        int8_row_dot(tag, blocks[r], xq, dx, xs, out, r)


@njit(parallel=True, cache=True, nogil=True)
def _launch(span, tag, x, blocks, out, rows_per_task):
    """matmul_int8's parallel part (span: _span's address for the format, tag the neutral one)."""
    t, k = x.shape
    xq = np.empty((t, k), dtype=np.int8)  # (T, K)
    dx = np.empty((t, k // 32), dtype=np.float32)  # (T, K/32)
    xs = np.empty((t, k // 16), dtype=np.int32)  # (T, K/16)
    quantize_rows(x, xq, dx, xs)
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start, stop = task * rows_per_task, min(n, (task + 1) * rows_per_task)
        call_address(span, (tag, blocks, xq, dx, xs, out, start, stop))


def int8_task(task, xsum_dtype, ints: int) -> TaskByAddress:
    """TaskByAddress for an int8 kernel's task(tag, blocks, xq (T, K) int8, dx (T, K/32) float32, xsum (T, G)
    of xsum_dtype, out, then `ints` integers), the quantized x being the launcher's own arrays."""

    def argtypes(tag, blocks, out):
        x_arrays = (c_array(np.int8, 2), c_array(np.float32, 2), c_array(xsum_dtype, 2))
        return (tag, blocks, *x_arrays, out, *[types.int64] * ints)

    return TaskByAddress(task, argtypes, NEUTRAL_TAG)


_SPAN_TASK = int8_task(_span, np.int32, 2)  # _span(tag, blocks, xq, dx, xs, out, start, stop)


def matmul_int8(x, blocks, tag, out, rows_per_task):
    """out (T, N) = int8-rounded x (T, K) float32 @ dequantized(blocks (N, row_bytes)).T; x is quantized
    once, before the parallel loop over row tasks."""
    _launch(_SPAN_TASK.address(tag, blocks, out), NEUTRAL_TAG, x, blocks, out, rows_per_task)
