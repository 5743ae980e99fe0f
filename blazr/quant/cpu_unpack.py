"""Packed GGML rows unpacked for the int8 GEMM (blazr.quant.cpu_int8_gemm): one byte per weight and float scales.

`unpack_row(tag, row, q, ws, mins)` writes, for the K values of one packed row,
    q    (K,)    uint8    each value's unsigned integer (at most 63: cpu_gemm_simd), SIGNED formats' int8
    ws   (K/4,)  float32  the scale of each run of 4 values (the lane width of vpdpbusd)
    mins (K/16,) float32  the offset of each 16-value group
so that value j = ws[j // 4] * q[j] - mins[j // 16], the format's dequantization with its offset
(q - 8, q - 32, ...) or minimum moved into `mins`. Every format here has groups of 16 or 32 values, so a scale
is constant over 4 values and an offset over 16.

Q8_0 (SIGNED) keeps its int8 weights as they are, two's complement bytes in q: q holds -128..127 there,
value j = ws[j // 4] * int8(q[j]) and mins = 0; the GEMM runs its signed tile on them (cpu_gemm_simd).

Why unpack at all: a prefill matmul multiplies each weight by every prompt token, so a row is unpacked once
and then read 100+ times by the GEMM, which then needs no format-specific code: one kernel for every format.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from blazr.quant.cpu_blocks import dispatch_by_format
from blazr.quant.cpu_int8_dots import _k_scale_min
from blazr.quant.cpu_simd import (
    f16_at,
    unpack_q2_k,
    unpack_q3_k,
    unpack_q4,
    unpack_q4_k,
    unpack_q5,
    unpack_q5_k,
    unpack_q6_k,
)


@njit(inline="always")
def _fill(a, start, count, value):
    for i in range(start, start + count):
        a[i] = value


# ---- 32-value blocks -------------------------------------------------------------------------------------


@njit(inline="always")  # into each wrapper below, where the layout arguments are constants
def _q4_q5(row, q, ws, mins, block_bytes, five, has_min):
    """Q4_0 (d, qs[16]; q - 8), Q4_1 (d, m, qs[16]; d q + m), Q5_0 (d, qh[4], qs[16]; q - 16), Q5_1."""
    qh_at = 4 if has_min else 2
    qs_at = qh_at + (4 if five else 0)
    for b in range(q.size // 32):
        o, v = b * block_bytes, 32 * b
        d = f16_at(row, o)
        m = -f16_at(row, o + 2) if has_min else d * np.float32(16.0 if five else 8.0)
        if five:
            unpack_q5(row, o + qs_at, o + qh_at, q, v)
        else:
            unpack_q4(row, o + qs_at, q, v)
        _fill(ws, 8 * b, 8, d)
        _fill(mins, 2 * b, 2, m)


@njit(fastmath=True, nogil=True)
def _q4_0(row, q, ws, mins):
    _q4_q5(row, q, ws, mins, 18, False, False)


@njit(fastmath=True, nogil=True)
def _q4_1(row, q, ws, mins):
    _q4_q5(row, q, ws, mins, 20, False, True)


@njit(fastmath=True, nogil=True)
def _q5_0(row, q, ws, mins):
    _q4_q5(row, q, ws, mins, 22, True, False)


@njit(fastmath=True, nogil=True)
def _q5_1(row, q, ws, mins):
    _q4_q5(row, q, ws, mins, 24, True, True)


# ---- 256-value K-quant super-blocks ---------------------------------------------------------------------


@njit(inline="always")
def _q45_k(row, q, ws, mins, five):
    """Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (+ qh[32] before qs): chunk c of 32 bytes holds group 2c
    in its low nibbles and 2c + 1 in its high ones (bit 2c / 2c + 1 of qh[j] is Q5_K's bit 4); v = d sc q - dmin m."""
    block_bytes, qs_at = (176, 48) if five else (144, 16)
    for b in range(q.size // 256):
        o, v = b * block_bytes, 256 * b
        d, dmin = f16_at(row, o), f16_at(row, o + 2)
        for c in range(4):
            if five:
                unpack_q5_k(row, o + qs_at + 32 * c, o + 16, c, q, v + 64 * c)
            else:
                unpack_q4_k(row, o + qs_at + 32 * c, q, v + 64 * c)
        for g in range(8):
            sc, mn = _k_scale_min(row, o, g)
            _fill(ws, (v >> 2) + 8 * g, 8, d * np.float32(sc))
            _fill(mins, (v >> 4) + 2 * g, 2, dmin * np.float32(mn))


@njit(fastmath=True, nogil=True)
def _q4_k(row, q, ws, mins):
    _q45_k(row, q, ws, mins, False)


@njit(fastmath=True, nogil=True)
def _q5_k(row, q, ws, mins):
    _q45_k(row, q, ws, mins, True)


@njit(fastmath=True, nogil=True)
def _q2_k(row, q, ws, mins):
    """Q2_K (scales[16] = scale | min << 4, qs[64], d, dmin): value 128 h + 32 f + j is field f
    ((qs[32 h + j] >> 2 f) & 3) of half h, in 16-group 8 h + 2 f + j // 16; v = d sc q - dmin m."""
    for b in range(q.size // 256):
        o, v = 84 * b, 256 * b
        d, dmin = f16_at(row, o + 80), f16_at(row, o + 82)
        for h in range(2):
            for f in range(4):
                unpack_q2_k(row, o + 16 + 32 * h, 2 * f, q, v + 128 * h + 32 * f)
        for g in range(16):
            sc = np.int32(row[o + g])
            _fill(ws, (v >> 2) + 4 * g, 4, d * np.float32(sc & 15))
            mins[(v >> 4) + g] = dmin * np.float32(sc >> 4)


@njit(inline="always")
def _q3_k_scale(row, o, s):
    """Q3_K six-bit scale s (signed, -32..31) from the 12 bytes at o + 96 of one super-block."""
    low = (np.int32(row[o + 96 + s % 8]) >> (4 * (s // 8))) & 15
    high = (np.int32(row[o + 104 + s % 4]) >> (2 * (s // 4))) & 3
    return (low | (high << 4)) - 32


@njit(fastmath=True, nogil=True)
def _q3_k(row, q, ws, mins):
    """Q3_K (hmask[32], qs[64], scales[12], d): value 128 h + 32 f + j has low bits (qs[32 + 32 h + j] >> 2 f) & 3
    and bit 2 from bit 4 h + f of hmask[j]; v = d sc (q - 4) in 16-group 8 h + 2 f + j // 16."""
    for b in range(q.size // 256):
        o, v = 110 * b, 256 * b
        d = f16_at(row, o + 108)
        for h in range(2):
            for f in range(4):
                unpack_q3_k(row, o + 32 + 32 * h, 2 * f, o, 4 * h + f, q, v + 128 * h + 32 * f)
        for g in range(16):
            scale = d * np.float32(_q3_k_scale(row, o, g))
            _fill(ws, (v >> 2) + 4 * g, 4, scale)
            mins[(v >> 4) + g] = np.float32(4.0) * scale


@njit(fastmath=True, nogil=True)
def _q6_k(row, q, ws, mins):
    """Q6_K (ql[128], qh[64], scales[16] int8, d): value 128 h + 32 c + j has low bits
    (ql[64 h + 32 (c & 1) + j] >> 4 (c >> 1)) & 15 and high bits (qh[32 h + j] >> 2 c) & 3; v = d sc (q - 32)
    in 16-group 8 h + 2 c + j // 16."""
    for b in range(q.size // 256):
        o, v = 210 * b, 256 * b
        d = f16_at(row, o + 208)
        for h in range(2):
            for c in range(4):
                ql_at, qh_at = o + 64 * h + 32 * (c & 1), o + 128 + 32 * h
                unpack_q6_k(row, ql_at, qh_at, 4 * (c >> 1), 2 * c, q, v + 128 * h + 32 * c)
        for g in range(16):
            scale = d * np.float32((np.int32(row[o + 192 + g]) ^ 128) - 128)
            _fill(ws, (v >> 2) + 4 * g, 4, scale)
            mins[(v >> 4) + g] = np.float32(32.0) * scale


@njit(fastmath=True, nogil=True)
def _i4z(row, q, ws, mins):
    """I4Z, blazr's AWQ/GPTQ int4 (d f16, z u16, qs[16] as Q4_0; v = (q - z) d): offset z d."""
    for b in range(q.size // 32):
        o = 20 * b
        d = f16_at(row, o)
        z = np.float32(np.int32(row[o + 2]) | (np.int32(row[o + 3]) << 8))
        unpack_q4(row, o + 4, q, 32 * b)
        _fill(ws, 8 * b, 8, d)
        _fill(mins, 2 * b, 2, z * d)


@njit(fastmath=True, nogil=True)
def _q8_0(row, q, ws, mins):
    """Q8_0 (d, qs[32] int8; v = d q): the bytes copied as they are (signed, see the module docstring)."""
    for b in range(q.size // 32):
        o, v = 34 * b, 32 * b
        q[v : v + 32] = row[o + 2 : o + 34]
        _fill(ws, 8 * b, 8, f16_at(row, o))
        _fill(mins, 2 * b, 2, np.float32(0.0))


# type name -> fn(row (row_bytes,) uint8, q (K,) uint8, ws (K/4,) float32, mins (K/16,) float32)
UNPACKERS: dict = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
    "I4Z": _i4z,
}  # fmt: skip

# formats whose q bytes are int8 (-128..127), for cpu_gemm_simd's signed tile; the others' are 0..63
SIGNED: frozenset[str] = frozenset({"Q8_0"})

# unpack_row(tag, row, q, ws, mins): the row in the GEMM's layout (see the module docstring)
unpack_row = dispatch_by_format(UNPACKERS, "unpack_row")
