"""Field readers shared by the GGML block decoders (`ggml_blocks`, `iq_blocks`, `tq_blocks`).

Every reader takes a batch of whole blocks (n, block_bytes) uint8 and works on all of them at once.
"""

from __future__ import annotations

import numpy as np

SHIFT_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
SHIFT_1BIT = np.array(range(8), dtype=np.uint8).reshape(1, 8, 1)

# (256, 8) uint32: sign byte -> the f32 sign bit for each of its 8 values (bit j -> value j).
SIGN_BIT_MASKS = (
    (np.arange(256, dtype=np.uint32)[:, None] >> np.arange(8, dtype=np.uint32)) & 1
) << np.uint32(31)


def f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The f16 field at byte `offset` of every block, as (n, 1) float32."""
    return blocks[:, offset : offset + 2].view(np.float16).astype(np.float32)


def f32_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The f32 field at byte `offset` of every block, as (n, 1) float32."""
    return blocks[:, offset : offset + 4].view(np.float32).copy()


def nibbles(packed: np.ndarray) -> np.ndarray:
    """(..., w) bytes -> (..., 2, w): all low nibbles, then all high nibbles (the ggml order)."""
    out = np.empty((*packed.shape[:-1], 2, packed.shape[-1]), dtype=np.uint8)
    np.bitwise_and(packed, 0x0F, out=out[..., 0, :])
    np.right_shift(packed, 4, out=out[..., 1, :])
    return out


def scale_into(out: np.ndarray, q: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None) -> None:
    """out = scale * q (+ offset), rounded after each op as ggml does; a plain cast then in-place ops is the
    fastest numpy order."""
    out[:] = q
    out *= scale
    if offset is not None:
        out += offset


def flip_signs(out: np.ndarray, sign_masks: np.ndarray) -> None:
    """Negate the values of `out` (..., 8) whose mask word (..., 8) uint32 has the f32 sign bit set.

    Flipping the bit is exactly ggml's multiply by -1.0, zeros and all, without a float multiply."""
    bits = out.view(np.uint32)
    bits ^= sign_masks
