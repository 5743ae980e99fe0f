"""Decoders of the IQ ("importance matrix") GGML types: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
IQ4_NL, IQ4_XS.

Most IQ types store, per group of 4 or 8 values, an index into a codebook (`iq_grids`) plus sign bits; the
4-bit ones index 16 non-uniform levels. Each decoder takes (n, block_bytes) uint8 and fills (n, block_elems)
float32 with the float ops of ggml-quants.c / gguf-py in the same order, so results match bit for bit.
"""

from __future__ import annotations

import numpy as np

from blazr.quant.block_fields import SIGN_BIT_MASKS, f16_field, flip_signs, nibbles
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

_SHIFT_7BIT = np.array([0, 7, 14, 21], dtype=np.uint32)  # four 7-bit sign indices in a u32
_SHIFT_3BIT = np.array([0, 3, 6, 9], dtype=np.uint16)  # four 3-bit fields in a u16
_SHIFT_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8)
_SHIFT_2BIT_U16 = np.arange(0, 16, 2, dtype=np.uint16)  # eight 2-bit fields in a u16
_SHIFT_D_NIBBLES = np.array([12, 8, 4, 0], dtype=np.uint16)

# (128, 8) uint32: 7-bit sign index -> f32 sign-bit masks of its 8 values.
_SIGN_INDEX_MASKS = SIGN_BIT_MASKS[SIGN_PATTERNS]
# (4096, 8) float32: IQ1 grid rows with the offset already added; row (delta sign bit << 11) | grid index.
_IQ1_SHIFTED = np.concatenate([IQ1_GRID + np.float32(IQ1_DELTA), IQ1_GRID - np.float32(IQ1_DELTA)])
_IQ4_LEVELS = np.array(IQ4_NL_VALUES, dtype=np.float32)


def _half_step_scales(d: np.ndarray, codes: np.ndarray, step: float) -> np.ndarray:
    """IQ2/IQ3_XXS group scales: d * (0.5 + code) * step, in ggml's order. d (n, 1), codes (n, groups)."""
    return d * (np.float32(0.5) + codes.astype(np.float32)) * np.float32(step)


def _rows(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """table[index] along axis 0; np.take is several times faster than fancy indexing here."""
    return np.take(table, index, axis=0, mode="clip")


def _gather_scaled(out: np.ndarray, table: np.ndarray, index: np.ndarray, scales: np.ndarray) -> None:
    """out = table[index] * scales: entries gathered straight into `out` (index in range, so no checks)."""
    np.take(table, index.reshape(out.shape[: out.ndim - table.ndim + 1]), axis=0, out=out, mode="clip")
    out *= scales


def _packed_scale_codes(packed: np.ndarray) -> np.ndarray:
    """(n, w) bytes of two 4-bit scales each -> (n, 2w): low nibble first, byte by byte."""
    return nibbles(packed.reshape(len(packed), -1, 1)).reshape(len(packed), -1)


# ---- 2-bit codebooks ------------------------------------------------------------------------------------


def _decode_iq2_xxs(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, then per group of 32 two u32: 4 grid-index bytes; 4 x 7-bit sign indices | 4-bit scale
    n = len(blocks)
    words = blocks[:, 2:66].view(np.uint32).reshape(n, 8, 2)
    scales = _half_step_scales(f16_field(blocks, 0), words[:, :, 1] >> 28, 0.25)  # (n, 8)
    grid_index = blocks[:, 2:66].reshape(n, 8, 2, 4)[:, :, 0]  # (n, 8, 4)
    out_rows = out.reshape(n, 8, 4, 8)
    _gather_scaled(out_rows, IQ2_XXS_GRID, grid_index, scales.reshape(n, 8, 1, 1))
    flip_signs(out_rows, _rows(_SIGN_INDEX_MASKS, (words[:, :, 1:2] >> _SHIFT_7BIT) & 0x7F))


def _decode_iq2_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[32] u16 (9-bit grid index | 7-bit sign index << 9), scales[8] (4 bits per 16 values)
    n = len(blocks)
    codes = blocks[:, 2:66].view(np.uint16)  # (n, 32)
    scales = _half_step_scales(f16_field(blocks, 0), _packed_scale_codes(blocks[:, 66:74]), 0.25)  # (n, 16)
    out_rows = out.reshape(n, 16, 2, 8)
    _gather_scaled(out_rows, IQ2_XS_GRID, codes & 511, scales.reshape(n, 16, 1, 1))
    flip_signs(out_rows, _rows(_SIGN_INDEX_MASKS, codes >> 9).reshape(n, 16, 2, 8))


def _decode_iq2_s(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[32] (grid index bits 0-7), signs[32], qh[8] (bits 8-9, 4 rows a byte), scales[8]
    n = len(blocks)
    high = (blocks[:, 66:74, None] >> _SHIFT_2BIT) & 3  # (n, 8, 4)
    grid_index = blocks[:, 2:34] | (high.reshape(n, 32).astype(np.uint16) << 8)  # (n, 32)
    scales = _half_step_scales(f16_field(blocks, 0), _packed_scale_codes(blocks[:, 74:82]), 0.25)  # (n, 16)
    out_rows = out.reshape(n, 16, 2, 8)
    _gather_scaled(out_rows, IQ2_S_GRID, grid_index, scales.reshape(n, 16, 1, 1))
    flip_signs(out_rows, _rows(SIGN_BIT_MASKS, blocks[:, 34:66]).reshape(n, 16, 2, 8))


# ---- 3-bit codebooks ------------------------------------------------------------------------------------


def _decode_iq3_xxs(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[64] (grid index per 4 values), 8 u32: 4 x 7-bit sign indices | 4-bit scale << 28
    n = len(blocks)
    words = blocks[:, 66:98].view(np.uint32)  # (n, 8)
    scales = _half_step_scales(f16_field(blocks, 0), words >> 28, 0.5)  # (n, 8)
    # 8 groups of 32: gathered as 8 grid rows of 4, signed as 4 sign bytes of 8
    _gather_scaled(out.reshape(n, 8, 8, 4), IQ3_XXS_GRID, blocks[:, 2:66], scales.reshape(n, 8, 1, 1))
    out_rows = out.reshape(n, 8, 4, 8)
    flip_signs(out_rows, _rows(_SIGN_INDEX_MASKS, (words[:, :, None] >> _SHIFT_7BIT) & 0x7F))


def _decode_iq3_s(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[64] (grid index bits 0-7), qh[8] (bit 8), signs[32], scales[4] (4 bits per 32 values)
    n = len(blocks)
    high = np.unpackbits(blocks[:, 66:74], axis=1, bitorder="little")  # (n, 64)
    grid_index = blocks[:, 2:66] | (high.astype(np.uint16) << 8)  # (n, 64)
    scales = f16_field(blocks, 0) * (1 + 2 * _packed_scale_codes(blocks[:, 106:110]))  # (n, 8)
    _gather_scaled(out.reshape(n, 8, 8, 4), IQ3_S_GRID, grid_index, scales.reshape(n, 8, 1, 1))
    out_rows = out.reshape(n, 8, 4, 8)
    flip_signs(out_rows, _rows(SIGN_BIT_MASKS, blocks[:, 74:106]).reshape(n, 8, 4, 8))


# ---- 1-bit codebooks (values -1, 0, 1 shifted by +/- 1/8) -----------------------------------------------


def _decode_iq1_s(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[32] (grid index bits 0-7), qh[8] u16: 4 x 3 index bits, 3-bit scale, delta sign
    n = len(blocks)
    qh = blocks[:, 34:50].view(np.uint16)  # (n, 8)
    scales = f16_field(blocks, 0) * (2 * ((qh >> 12) & 7) + 1)  # (n, 8)
    high = (qh[:, :, None] >> _SHIFT_3BIT) & 7  # (n, 8, 4)
    row = blocks[:, 2:34].reshape(n, 8, 4) | (high << 8) | ((qh[:, :, None] >> 15) << 11)
    _gather_scaled(out.reshape(n, 8, 4, 8), _IQ1_SHIFTED, row, scales.reshape(n, 8, 1, 1))


def _decode_iq1_m(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: qs[32] (grid index bits 0-7), qh[16] (a nibble per row: 3 index bits | delta sign << 3),
    # 4 u16: 16 x 3-bit scales (one per 16 values), with the f16 d spread over their top nibbles
    n = len(blocks)
    words = blocks[:, 48:56].view(np.uint16)  # (n, 4)
    d_bits = np.bitwise_or.reduce((words & 0xF000) >> _SHIFT_D_NIBBLES, axis=1)  # (n,) uint16
    d = d_bits.view(np.float16).astype(np.float32).reshape(n, 1)
    scales = d * (2 * ((words[:, :, None] >> _SHIFT_3BIT) & 7).reshape(n, 16) + 1)  # (n, 16)
    row = blocks[:, 0:32] | (_packed_scale_codes(blocks[:, 32:48]).astype(np.uint16) << 8)  # (n, 32)
    _gather_scaled(out.reshape(n, 16, 2, 8), _IQ1_SHIFTED, row, scales.reshape(n, 16, 1, 1))


# ---- 4-bit non-uniform levels ---------------------------------------------------------------------------


def _decode_iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, qs[16] (4-bit level indices: low nibbles, then high)
    codes = nibbles(blocks[:, 2:18]).reshape(len(blocks), 32)
    _gather_scaled(out, _IQ4_LEVELS, codes, f16_field(blocks, 0))


def _decode_iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: d f16, scales_h u16 (2 bits per group), scales_l[4] (4 bits per group), qs[128]; 8 groups of 32
    n = len(blocks)
    high = (blocks[:, 2:4].view(np.uint16) >> _SHIFT_2BIT_U16) & 3  # (n, 8)
    scale_codes = _packed_scale_codes(blocks[:, 4:8]) | (high.astype(np.uint8) << 4)  # (n, 8) in 0..63
    scales = f16_field(blocks, 0) * (scale_codes.view(np.int8) - np.int8(32)).astype(np.float32)
    codes = nibbles(blocks[:, 8:136].reshape(n, 8, 16)).reshape(n, 8, 32)
    _gather_scaled(out.reshape(n, 8, 32), _IQ4_LEVELS, codes, scales.reshape(n, 8, 1))


DECODERS = {
    "IQ1_S": _decode_iq1_s,
    "IQ1_M": _decode_iq1_m,
    "IQ2_XXS": _decode_iq2_xxs,
    "IQ2_XS": _decode_iq2_xs,
    "IQ2_S": _decode_iq2_s,
    "IQ3_XXS": _decode_iq3_xxs,
    "IQ3_S": _decode_iq3_s,
    "IQ4_NL": _decode_iq4_nl,
    "IQ4_XS": _decode_iq4_xs,
}
