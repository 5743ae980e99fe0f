"""Decoders of the ternary GGML types TQ1_0 and TQ2_0: 256 values in {-1, 0, 1} times one f16 scale.

Each decoder takes (n, block_bytes) uint8 and fills (n, 256) float32 as gguf-py does, bit for bit.
"""

from __future__ import annotations

import numpy as np

from blazr.quant.block_fields import SHIFT_2BIT, f16_field, scale_into

# TQ1_0 packs 5 (or 4) base-3 digits in a byte as a fixed-point fraction: multiplying by 3^k (mod 256) moves
# digit k to the top, where (byte * 3) >> 8 reads it.
_POWERS_OF_3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8).reshape(5, 1)
# (256,) float32: such a byte -> its top digit - 1.
_TOP_TRIT = ((np.arange(256, dtype=np.uint16) * 3) >> 8).astype(np.float32) - np.float32(1)


def _decode_tq1_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: qs[48] (5 digits a byte: 32 bytes x 5, then 16 bytes x 5), qh[4] (4 digits a byte), d f16
    n = len(blocks)
    digits_on_top = np.empty((n, 256), dtype=np.uint8)  # uint8 products wrap, which is the point
    np.multiply(blocks[:, None, 0:32], _POWERS_OF_3, out=digits_on_top[:, 0:160].reshape(n, 5, 32))
    np.multiply(blocks[:, None, 32:48], _POWERS_OF_3, out=digits_on_top[:, 160:240].reshape(n, 5, 16))
    np.multiply(blocks[:, None, 48:52], _POWERS_OF_3[:4], out=digits_on_top[:, 240:256].reshape(n, 4, 4))
    np.take(_TOP_TRIT, digits_on_top, out=out, mode="clip")
    out *= f16_field(blocks, 52)


def _decode_tq2_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # block: qs[64] (4 two-bit codes a byte; 2 x 4 x 32 values; value = code - 1), d f16
    n = len(blocks)
    q = ((blocks[:, 0:64].reshape(n, 2, 1, 32) >> SHIFT_2BIT) & 3).view(np.int8)  # (n, 2, 4, 32)
    q -= 1
    scale_into(out, q.reshape(n, 256), f16_field(blocks, 64))


DECODERS = {"TQ1_0": _decode_tq1_0, "TQ2_0": _decode_tq2_0}
