"""numba row decoders of the IQ GGML types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL,
IQ4_XS): one packed row (row_bytes,) uint8 -> (K,) float32, registered in blazr.quant.cpu_blocks.DECODERS.

Each follows the numpy spec in blazr.quant.iq_blocks with the same float ops in the same order, so results
match it bit for bit: no fastmath here, as reassociation could move a rounding. A sign bit negates a value
after scaling, which is exact. The codebooks are module globals, which numba freezes into each kernel as
constants (the decoders keep the fixed (row, f16, out) signature of cpu_blocks).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.quant.cpu_blocks import _half, register_decoder
from blazr.quant.iq_grids import (
    IQ1_DELTA,
    IQ1_GRID,
    IQ2_S_GRID,
    IQ2_XS_GRID,
    IQ2_XXS_GRID,
    IQ3_S_GRID,
    IQ3_XXS_GRID,
    IQ4_NL_VALUES,
    SIGN_PATTERNS,
)

_IQ4_LEVELS = np.array(IQ4_NL_VALUES, dtype=np.float32)  # (16,)
_DELTA = np.float32(IQ1_DELTA)
_HALF = np.float32(0.5)


@njit(inline="always")
def _u16(blk, b, o):
    return np.int64(blk[b, o]) | (np.int64(blk[b, o + 1]) << 8)


@njit(inline="always")
def _u32(blk, b, o):
    return _u16(blk, b, o) | (_u16(blk, b, o + 2) << 16)


@njit(inline="always")
def _nibble(blk, b, o, i):
    """Scale code i of a field of 4-bit codes at byte o, low nibble first."""
    return (np.int64(blk[b, o + i // 2]) >> (4 * (i % 2))) & 15


@njit(inline="always")
def _signed_row(y, grid, signs, scale):
    """y (8,) = grid (8,) * scale, negated where bit j of `signs` is set."""
    for j in range(y.shape[0]):
        v = grid[j] * scale
        y[j] = -v if (signs >> j) & 1 else v


# ---- 2-bit codebooks (rows of 8 from values 8, 25, 43) --------------------------------------------------


@njit(cache=True)
def _iq2_xxs(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 66)  # d, then 8 x (4 grid-index bytes, u32: 4 x 7-bit sign indices | scale << 28)
    y = out.reshape(nb, 8, 4, 8)  # (block, 32-group, grid row, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for g in range(8):
            o = 2 + 8 * g
            aux = _u32(blk, b, o + 4)
            scale = d * (_HALF + np.float32(aux >> 28)) * np.float32(0.25)
            for r in range(4):
                signs = SIGN_PATTERNS[(aux >> (7 * r)) & 127]
                _signed_row(y[b, g, r], IQ2_XXS_GRID[blk[b, o + r]], signs, scale)


@njit(cache=True)
def _iq2_xs(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 74)  # d, qs[32] u16 (9-bit grid index | 7-bit sign index << 9), scales[8]
    y = out.reshape(nb, 16, 2, 8)  # (block, 16-group, grid row, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for s in range(16):
            scale = d * (_HALF + np.float32(_nibble(blk, b, 66, s))) * np.float32(0.25)
            for h in range(2):
                q = _u16(blk, b, 2 + 4 * s + 2 * h)
                _signed_row(y[b, s, h], IQ2_XS_GRID[q & 511], SIGN_PATTERNS[q >> 9], scale)


@njit(cache=True)
def _iq2_s(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 82)  # d, qs[32] (index bits 0-7), signs[32], qh[8] (bits 8-9), scales[8]
    y = out.reshape(nb, 16, 2, 8)  # (block, 16-group, grid row, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for s in range(16):
            scale = d * (_HALF + np.float32(_nibble(blk, b, 74, s))) * np.float32(0.25)
            for h in range(2):
                r = 2 * s + h
                high = (np.int64(blk[b, 66 + r // 4]) >> (2 * (r % 4))) & 3
                index = np.int64(blk[b, 2 + r]) | (high << 8)
                _signed_row(y[b, s, h], IQ2_S_GRID[index], np.int64(blk[b, 34 + r]), scale)


# ---- 3-bit codebooks (rows of 4; a sign byte covers two rows) -------------------------------------------


@njit(inline="always")
def _iq3_signed_pair(y, grid0, grid1, signs, scale):
    """y (8,) = (grid0 (4,), grid1 (4,)) * scale, negated where bit j of `signs` is set."""
    for j in range(grid0.shape[0]):
        v0, v1 = grid0[j] * scale, grid1[j] * scale
        y[j] = -v0 if (signs >> j) & 1 else v0
        y[j + 4] = -v1 if (signs >> (j + 4)) & 1 else v1


@njit(cache=True)
def _iq3_xxs(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 98)  # d, qs[64] (grid index per 4 values), 8 u32: 4 x 7-bit sign indices | scale
    y = out.reshape(nb, 8, 4, 8)  # (block, 32-group, sign byte, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for g in range(8):
            aux = _u32(blk, b, 66 + 4 * g)
            scale = d * (_HALF + np.float32(aux >> 28)) * _HALF
            for r in range(4):
                i = 2 + 8 * g + 2 * r
                grid0, grid1 = IQ3_XXS_GRID[blk[b, i]], IQ3_XXS_GRID[blk[b, i + 1]]
                _iq3_signed_pair(y[b, g, r], grid0, grid1, SIGN_PATTERNS[(aux >> (7 * r)) & 127], scale)


@njit(cache=True)
def _iq3_s(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 110)  # d, qs[64] (index bits 0-7), qh[8] (bit 8), signs[32], scales[4]
    y = out.reshape(nb, 8, 4, 8)  # (block, 32-group, sign byte, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for g in range(8):
            scale = d * np.float32(1 + 2 * _nibble(blk, b, 106, g))
            qh = np.int64(blk[b, 66 + g])  # bit 8 of the group's 8 grid indices
            for r in range(4):
                i = 2 + 8 * g + 2 * r
                grid0 = IQ3_S_GRID[np.int64(blk[b, i]) | (((qh >> (2 * r)) & 1) << 8)]
                grid1 = IQ3_S_GRID[np.int64(blk[b, i + 1]) | (((qh >> (2 * r + 1)) & 1) << 8)]
                _iq3_signed_pair(y[b, g, r], grid0, grid1, np.int64(blk[b, 74 + 4 * g + r]), scale)


# ---- 1-bit codebooks (values -1, 0, 1 shifted by +/- 1/8) -----------------------------------------------


@njit(inline="always")
def _iq1_row(y, index, scale):
    """y (8,) = (grid row + or - delta) * scale; bit 11 of `index` picks the minus sign of delta."""
    grid = IQ1_GRID[index & 2047]
    delta = -_DELTA if index >> 11 else _DELTA
    for j in range(y.shape[0]):
        y[j] = (grid[j] + delta) * scale


@njit(cache=True)
def _iq1_s(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 50)  # d, qs[32] (index bits 0-7), qh[8] u16: 4 x 3 index bits, scale, delta sign
    y = out.reshape(nb, 8, 4, 8)  # (block, 32-group, grid row, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for g in range(8):
            qh = _u16(blk, b, 34 + 2 * g)
            scale = d * np.float32(2 * ((qh >> 12) & 7) + 1)
            for r in range(4):
                index = np.int64(blk[b, 2 + 4 * g + r]) | (((qh >> (3 * r)) & 7) << 8) | ((qh >> 15) << 11)
                _iq1_row(y[b, g, r], index, scale)


@njit(cache=True)
def _iq1_m(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 56)  # qs[32], qh[16] (3 index bits | delta sign, a nibble per row), 4 u16 scales
    y = out.reshape(nb, 16, 2, 8)  # (block, 16-group, grid row, lane)
    for b in range(nb):
        w0, w1, w2, w3 = _u16(blk, b, 48), _u16(blk, b, 50), _u16(blk, b, 52), _u16(blk, b, 54)
        d = f16[(w0 >> 12) | ((w1 >> 12) << 4) | ((w2 >> 12) << 8) | ((w3 >> 12) << 12)]  # top nibbles
        for s in range(16):
            word = _u16(blk, b, 48 + 2 * (s // 4))
            scale = d * np.float32(2 * ((word >> (3 * (s % 4))) & 7) + 1)
            qh = np.int64(blk[b, 32 + s])
            _iq1_row(y[b, s, 0], np.int64(blk[b, 2 * s]) | ((qh & 15) << 8), scale)
            _iq1_row(y[b, s, 1], np.int64(blk[b, 2 * s + 1]) | ((qh >> 4) << 8), scale)


# ---- 4-bit non-uniform levels ---------------------------------------------------------------------------


@njit(cache=True)
def _iq4_nl(row, f16, out):
    nb = out.size // 32
    blk = row.reshape(nb, 18)  # d, qs[16] (level indices: low nibbles, then high)
    y = out.reshape(nb, 2, 16)  # (block, nibble, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        qs = blk[b, 2:18]  # (16,)
        for j in range(qs.size):
            y[b, 0, j] = _IQ4_LEVELS[qs[j] & 15] * d
            y[b, 1, j] = _IQ4_LEVELS[qs[j] >> 4] * d


@njit(cache=True)
def _iq4_xs(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 136)  # d, scales_h u16 (2 bits a group), scales_l[4] (4 bits a group), qs[128]
    y = out.reshape(nb, 8, 2, 16)  # (block, 32-group, nibble, lane)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        high_bits = _u16(blk, b, 2)
        for g in range(8):
            code = _nibble(blk, b, 4, g) | (((high_bits >> (2 * g)) & 3) << 4)
            scale = d * np.float32(code - 32)
            qs = blk[b, 8 + 16 * g : 24 + 16 * g]  # (16,)
            for j in range(qs.size):
                y[b, g, 0, j] = _IQ4_LEVELS[qs[j] & 15] * scale
                y[b, g, 1, j] = _IQ4_LEVELS[qs[j] >> 4] * scale


for _fmt, _decoder in {
    "IQ1_S": _iq1_s, "IQ1_M": _iq1_m, "IQ2_XXS": _iq2_xxs, "IQ2_XS": _iq2_xs, "IQ2_S": _iq2_s,
    "IQ3_XXS": _iq3_xxs, "IQ3_S": _iq3_s, "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs,
}.items():  # fmt: skip
    register_decoder(_fmt, _decoder)
