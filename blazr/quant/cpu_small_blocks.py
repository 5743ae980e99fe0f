"""numba row decoders of the GGML types with a plain scale per block and no codebook: the activation types
Q8_1 and Q8_K, the FP4 types MXFP4 and NVFP4, the ternary TQ1_0 and TQ2_0, and the 1-bit Q1_0. One packed
row (row_bytes,) uint8 -> (K,) float32, registered in blazr.quant.cpu_blocks.DECODERS.

Each follows the numpy spec (blazr.quant.ggml_blocks, tq_blocks) with the same float ops in the same order,
so results match it bit for bit; the FP4 lookup tables are the spec's own, frozen into the kernels by numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.quant.cpu_blocks import _half, register_decoder
from blazr.quant.ggml_blocks import _E8M0_HALF, _FP4_LEVELS, _UE4M3_HALF


@njit(inline="always")
def _int8(byte):
    return np.float32((np.int32(byte) ^ 128) - 128)


# ---- 8-bit activation types -----------------------------------------------------------------------------


@njit(cache=True)
def _q8_1(row, f16, out):
    """d, s (d * sum of q; unused), qs[32] int8: gguf-py's 40-byte layout has f32 d and s, ggml's current
    36-byte one f16; the row length tells which."""
    nb = out.size // 32
    blk = row.reshape(nb, row.size // nb)  # (nb, 40 | 36)
    d32 = row.view(np.float32).reshape(nb, blk.shape[1] // 4)  # (nb, 10 | 9): d at 0 when 40 bytes
    y = out.reshape(nb, 32)
    qo = 8 if blk.shape[1] == 40 else 4
    for b in range(nb):
        d = d32[b, 0] if qo == 8 else _half(blk, b, 0, f16)
        for j in range(y.shape[1]):
            y[b, j] = _int8(blk[b, qo + j]) * d


@njit(cache=True)
def _q8_k(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 292)  # d f32, qs[256] int8, bsums[16] int16 (unused)
    d32 = row.view(np.float32).reshape(nb, 73)  # d at 0
    y = out.reshape(nb, 256)
    for b in range(nb):
        d = d32[b, 0]
        for j in range(y.shape[1]):
            y[b, j] = _int8(blk[b, 4 + j]) * d


# ---- FP4 (e2m1 codes, doubled levels times half scales) -------------------------------------------------


@njit(cache=True)
def _mxfp4(row, f16, out):
    nb = out.size // 32
    blk = row.reshape(nb, 17)  # e8m0 scale, qs[16] (codes: low nibbles, then high)
    y = out.reshape(nb, 2, 16)  # (block, nibble, lane)
    for b in range(nb):
        scale = _E8M0_HALF[blk[b, 0]]
        qs = blk[b, 1:17]  # (16,)
        for j in range(qs.size):
            y[b, 0, j] = _FP4_LEVELS[qs[j] & 15] * scale
            y[b, 1, j] = _FP4_LEVELS[qs[j] >> 4] * scale


@njit(cache=True)
def _nvfp4(row, f16, out):
    nb = out.size // 64
    blk = row.reshape(nb, 36)  # 4 ue4m3 scales, qs[32]: 4 groups of 8 bytes (low nibbles, then high)
    y = out.reshape(nb, 4, 2, 8)  # (block, 16-group, nibble, lane)
    for b in range(nb):
        for g in range(4):
            scale = _UE4M3_HALF[blk[b, g]]
            qs = blk[b, 4 + 8 * g : 12 + 8 * g]  # (8,)
            for j in range(qs.size):
                y[b, g, 0, j] = _FP4_LEVELS[qs[j] & 15] * scale
                y[b, g, 1, j] = _FP4_LEVELS[qs[j] >> 4] * scale


# ---- ternary and 1-bit ----------------------------------------------------------------------------------


@njit(inline="always")
def _trit_digit(packed, y, power, d):
    """y (bytes,) = one base-3 digit of each byte of packed (bytes,), minus 1, times d. A byte holds its
    digits as a fixed-point fraction: times 3^k (mod 256) moves digit k to the top, where (q * 3) >> 8
    reads it."""
    for j in range(y.shape[0]):
        q = (np.int32(packed[j]) * power) & 255
        y[j] = np.float32(((q * 3) >> 8) - 1) * d


@njit(cache=True)
def _tq1_0(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 54)  # qs[48] (5 digits a byte: 32 bytes, then 16), qh[4] (4 digits a byte), d
    y = out.reshape(nb, 256)  # digit k of byte j: value 32k + j, 160 + 16k + (j - 32), 240 + 4k + (j - 48)
    for b in range(nb):
        d = _half(blk, b, 52, f16)
        power = np.int32(1)  # 3^k; 1-d slices per digit measured 1.6x faster than (digit, byte) views
        for k in range(5):
            _trit_digit(blk[b, 0:32], y[b, 32 * k : 32 * k + 32], power, d)
            _trit_digit(blk[b, 32:48], y[b, 160 + 16 * k : 176 + 16 * k], power, d)
            if k < 4:
                _trit_digit(blk[b, 48:52], y[b, 240 + 4 * k : 244 + 4 * k], power, d)
            power *= 3


@njit(cache=True)
def _tq2_0(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 66)  # qs[64] (4 two-bit codes a byte, value = code - 1), d
    y = out.reshape(nb, 2, 4, 32)  # (block, 32-byte half, 2-bit field, lane)
    for b in range(nb):
        d = _half(blk, b, 64, f16)
        for h in range(2):
            qs = blk[b, 32 * h : 32 * h + 32]  # (32,)
            for f in range(4):
                for j in range(qs.size):
                    y[b, h, f, j] = np.float32(((np.int32(qs[j]) >> (2 * f)) & 3) - 1) * d


@njit(cache=True)
def _q1_0(row, f16, out):
    nb = out.size // 128
    blk = row.reshape(nb, 18)  # d, qs[16]: bit j of byte i set -> value 8i + j is +d, clear -> -d
    y = out.reshape(nb, 16, 8)  # (block, byte, bit)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for i in range(16):
            bits = np.int32(blk[b, 2 + i])
            for j in range(y.shape[2]):
                y[b, i, j] = d if (bits >> j) & 1 else -d


for _fmt, _decoder in {
    "Q8_1": _q8_1, "Q8_K": _q8_k, "MXFP4": _mxfp4, "NVFP4": _nvfp4, "TQ1_0": _tq1_0, "TQ2_0": _tq2_0,
    "Q1_0": _q1_0,
}.items():  # fmt: skip
    register_decoder(_fmt, _decoder)
