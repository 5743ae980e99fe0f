"""The slow, obviously correct quantized matmul: dequantize a tile of packed rows with numpy, multiply, repeat.

Weights stay packed; only one tile of about 4 MB of float32 exists at a time. This is the CPU path when numba
is absent and the yardstick the fast kernels (blazr.quant.cpu_kernels) are tested against.
"""

from __future__ import annotations

import numpy as np

from blazr.quant import QuantRowStack, QuantWeight
from blazr.quant.ggml_blocks import dequantize

_TILE_ELEMS = 1 << 20  # float32 values per dequantized tile


def dequantize_rows(w: QuantWeight, start: int, stop: int) -> np.ndarray:
    """Rows start..stop-1 of `w` as float32 (stop - start, K)."""
    return dequantize(w.blocks[start:stop], w.format, (stop - start, w.shape[1]))


def matmul(x: np.ndarray, w: QuantWeight | QuantRowStack) -> np.ndarray:
    """x (T, K) float32 @ dequantized(w).T -> (T, N) float32."""
    if isinstance(w, QuantRowStack):
        return np.concatenate([matmul(x, part) for part in w.parts], axis=1)
    n, k = w.shape
    out = np.empty((x.shape[0], n), dtype=np.float32)  # (T, N)
    tile = max(1, _TILE_ELEMS // k)
    for start in range(0, n, tile):
        stop = min(n, start + tile)
        out[:, start:stop] = x @ dequantize_rows(w, start, stop).T
    return out


def embed(w: QuantWeight, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` (T,) of the dequantized table -> (T, K) float32; only those rows are decoded."""
    rows = w.blocks[np.asarray(ids)]  # (T, row_bytes)
    return dequantize(rows, w.format, (len(rows), w.shape[1]))
