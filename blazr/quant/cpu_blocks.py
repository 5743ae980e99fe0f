"""numba row decoders for the GGML block types: one packed row (row_bytes,) uint8 -> (K,) float32.

Each follows the block layout of blazr.quant.ggml_blocks (the numpy spec) with 32-bit integer arithmetic and
contiguous inner loops, so LLVM vectorises them. `decode_row` dispatches on a small integer type code, which
keeps every caller a single cacheable function (numba cannot cache functions passed as arguments).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# type name -> code used inside the kernels
TYPE_CODES: dict[str, int] = {
    "Q4_0": 0, "Q4_1": 1, "Q5_0": 2, "Q5_1": 3, "Q8_0": 4,
    "Q2_K": 5, "Q3_K": 6, "Q4_K": 7, "Q5_K": 8, "Q6_K": 9,
}  # fmt: skip

# Every f16 bit pattern as float32 (256 KB): a table lookup is exact and cheaper than bit twiddling.
F16_TABLE = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


@njit(inline="always")
def _half(row, o, f16):
    return f16[np.int32(row[o]) | (np.int32(row[o + 1]) << 8)]


@njit(inline="always")
def _u32(row, o):
    return (
        np.uint32(row[o])
        | (np.uint32(row[o + 1]) << 8)
        | (np.uint32(row[o + 2]) << 16)
        | (np.uint32(row[o + 3]) << 24)
    )


# ---- 32-value blocks ------------------------------------------------------------------------------------


@njit(cache=True)
def _q4_0(row, f16, out):
    for b in range(out.size // 32):  # block: d f16, qs[16]
        o, y = b * 18, b * 32
        d = _half(row, o, f16)
        for j in range(16):
            q = np.int32(row[o + 2 + j])
            out[y + j] = np.float32((q & 15) - 8) * d
            out[y + j + 16] = np.float32((q >> 4) - 8) * d


@njit(cache=True)
def _q4_1(row, f16, out):
    for b in range(out.size // 32):  # block: d f16, m f16, qs[16]
        o, y = b * 20, b * 32
        d, m = _half(row, o, f16), _half(row, o + 2, f16)
        for j in range(16):
            q = np.int32(row[o + 4 + j])
            out[y + j] = np.float32(q & 15) * d + m
            out[y + j + 16] = np.float32(q >> 4) * d + m


@njit(cache=True)
def _q5(row, f16, out, block_bytes, has_min):
    """Q5_0 (d, qh[4], qs[16]; offset 16) and Q5_1 (d, m, qh[4], qs[16])."""
    for b in range(out.size // 32):
        o, y = b * block_bytes, b * 32
        d = _half(row, o, f16)
        m = _half(row, o + 2, f16) if has_min else np.float32(0.0)
        qo = o + 4 if has_min else o + 2
        qh = _u32(row, qo)
        bias = 0 if has_min else 16
        for j in range(16):
            q = np.int32(row[qo + 4 + j])
            hi0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
            hi1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
            out[y + j] = np.float32(((q & 15) | hi0) - bias) * d + m
            out[y + j + 16] = np.float32(((q >> 4) | hi1) - bias) * d + m


@njit(cache=True)
def _q8_0(row, f16, out):
    for b in range(out.size // 32):  # block: d f16, qs[32] int8
        o, y = b * 34, b * 32
        d = _half(row, o, f16)
        for j in range(32):
            out[y + j] = np.float32(np.int8(row[o + 2 + j])) * d


# ---- 256-value K-quant super-blocks ---------------------------------------------------------------------


@njit(cache=True)
def _q2_k(row, f16, out):
    for b in range(out.size // 256):  # scales[16] (scale | min << 4), qs[64], d, dmin
        o, y = b * 84, b * 256
        d, dmin = _half(row, o + 80, f16), _half(row, o + 82, f16)
        for g in range(16):  # group g: 16 values, 2-bit field g // 2 % 4 of bytes (g // 8) * 32 + l
            sc = np.int32(row[o + g])
            dl, ml = d * np.float32(sc & 15), dmin * np.float32(sc >> 4)
            shift, base = 2 * ((g // 2) % 4), o + 16 + (g // 8) * 32 + (g % 2) * 16
            for l in range(16):
                out[y + g * 16 + l] = dl * np.float32((np.int32(row[base + l]) >> shift) & 3) - ml


@njit(cache=True)
def _q3_k_scale(row, o, s):
    low = (np.int32(row[o + 96 + s % 8]) >> (4 * (s // 8))) & 15
    high = (np.int32(row[o + 104 + s % 4]) >> (2 * (s // 4))) & 3
    return np.float32((low | (high << 4)) - 32)


@njit(cache=True)
def _q3_k(row, f16, out):
    for b in range(out.size // 256):  # hmask[32], qs[64] (2-bit), scales[12], d
        o, y = b * 110, b * 256
        d = _half(row, o + 108, f16)
        for g in range(16):  # value i = g * 16 + l: low bits from qs, bit i // 32 of hmask[i % 32]
            dl = d * _q3_k_scale(row, o, g)
            m = g // 2  # 32-value chunk: half m // 4, 2-bit shift m % 4
            shift, base = 2 * (m % 4), o + 32 + (m // 4) * 32 + (g % 2) * 16
            for l in range(16):
                lane = (g % 2) * 16 + l
                low = (np.int32(row[base + l]) >> shift) & 3
                high = (np.int32(row[o + lane]) >> m) & 1
                out[y + g * 16 + l] = dl * np.float32((low | (high << 2)) - 4)


@njit(cache=True)
def _k_scale_min(row, o, g):
    """Q4_K/Q5_K six-bit (scale, min) of group g from the 12 bytes at o + 4."""
    p = o + 4
    if g < 4:
        return np.int32(row[p + g]) & 63, np.int32(row[p + g + 4]) & 63
    sc = (np.int32(row[p + g + 4]) & 15) | ((np.int32(row[p + g - 4]) >> 6) << 4)
    mn = (np.int32(row[p + g + 4]) >> 4) | ((np.int32(row[p + g]) >> 6) << 4)
    return sc, mn


@njit(cache=True)
def _q45_k(row, f16, out, five):
    """Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (d, dmin, scales[12], qh[32], qs[128])."""
    block_bytes = 176 if five else 144
    for b in range(out.size // 256):
        o, y = b * block_bytes, b * 256
        d, dmin = _half(row, o, f16), _half(row, o + 2, f16)
        qs = o + 48 if five else o + 16
        for g in range(8):  # group g: nibble g % 2 of bytes qs + (g // 2) * 32 + l
            sc, mn = _k_scale_min(row, o, g)
            dl, ml = d * np.float32(sc), dmin * np.float32(mn)
            base, shift = qs + (g // 2) * 32, 4 * (g % 2)
            for l in range(32):
                q = (np.int32(row[base + l]) >> shift) & 15
                if five:
                    q |= ((np.int32(row[o + 16 + l]) >> g) & 1) << 4
                out[y + g * 32 + l] = dl * np.float32(q) - ml


@njit(cache=True)
def _q6_k(row, f16, out):
    for b in range(out.size // 256):  # ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d
        o, y = b * 210, b * 256
        d = _half(row, o + 208, f16)
        for c in range(8):  # 32-value chunk c: half h, nibble k of ql, 2-bit field a of qh
            h, a = c // 4, c % 4
            lo_base, lo_shift, hi_base = o + h * 64 + (a % 2) * 32, 4 * (a // 2), o + 128 + h * 32
            for s in range(2):
                dl = d * np.float32(np.int8(row[o + 192 + c * 2 + s]))
                for l in range(s * 16, s * 16 + 16):
                    low = (np.int32(row[lo_base + l]) >> lo_shift) & 15
                    high = (np.int32(row[hi_base + l]) >> (2 * a)) & 3
                    out[y + c * 32 + l] = dl * np.float32((low | (high << 4)) - 32)


@njit(cache=True)
def decode_row(code, row, f16, out):
    """Decode one packed row of type `code` (TYPE_CODES) into out (K,) float32."""
    if code == 0:
        _q4_0(row, f16, out)
    elif code == 1:
        _q4_1(row, f16, out)
    elif code == 2:
        _q5(row, f16, out, 22, False)
    elif code == 3:
        _q5(row, f16, out, 24, True)
    elif code == 4:
        _q8_0(row, f16, out)
    elif code == 5:
        _q2_k(row, f16, out)
    elif code == 6:
        _q3_k(row, f16, out)
    elif code == 7:
        _q45_k(row, f16, out, False)
    elif code == 8:
        _q45_k(row, f16, out, True)
    else:
        _q6_k(row, f16, out)
