"""Swin's (shifted) window self-attention over a grid of tokens, on attention_dense (HTSAT, CLAP's audio tower).

The grid (height, width) of tokens, row-major, is rolled up-left by `shift` and cut into window x window
squares; each square attends within itself, with a learned relative position bias (one value per head and
(row, column) offset) and, for a shifted layer, a -100 mask between tokens that the roll brought together from
opposite edges. The result is rolled back.

attention_dense has no per-window bias argument, so the bias rides in the dot product instead: q gains L =
window^2 extra features (a one-hot of the query's place in its window) and k gains L (the bias row of the key's
window and place, divided by the score scale), so scale * (q'.k') = scale * q.k + bias[i, j] exactly. The q/k
weights are widened with zero rows at load and the extra features added as a constant. This costs L extra
multiply-adds per score and no new backend op; every backend runs it as it runs BERT.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import Array, host_array, trace
from blazr.models.layers.module import Module, Weight, weight

MASK = -100.0  # the shifted-window mask value of Swin / HTSAT


def window_order(height: int, width: int, window: int, shift: int) -> np.ndarray:
    """(T,) the grid token each row of the window-ordered sequence reads: the grid rolled by -shift on both
    axes, then window after window (row-major), each window's tokens row-major."""
    rows = (np.arange(height) + shift) % height
    cols = (np.arange(width) + shift) % width
    source = rows[:, None] * width + cols[None, :]  # (H, W)
    tiles = source.reshape(height // window, window, width // window, window).transpose(0, 2, 1, 3)
    return tiles.reshape(-1).astype(np.int32)


def shift_mask(height: int, width: int, window: int, shift: int) -> np.ndarray:
    """(windows, L, L) 0 between tokens of one region of the rolled grid, MASK across regions (all 0 unshifted)."""

    def regions(n: int) -> np.ndarray:
        i = np.arange(n)
        return (i >= n - window).astype(int) + (i >= n - shift).astype(int)

    label = regions(height)[:, None] * 3 + regions(width)[None, :]  # (H, W)
    if shift == 0:
        label = np.zeros_like(label)
    tiles = label.reshape(height // window, window, width // window, window).transpose(0, 2, 1, 3)
    tiles = tiles.reshape(-1, window * window)  # (windows, L)
    return np.where(tiles[:, :, None] == tiles[:, None, :], 0.0, MASK)


def relative_bias(table: np.ndarray, window: int) -> np.ndarray:
    """(heads, L, L) bias of query i and key j of a window from the table ((2w - 1)^2, heads)."""
    r, c = np.divmod(np.arange(window * window), window)  # (L,) row and column inside the window
    index = (r[:, None] - r[None, :] + window - 1) * (2 * window - 1) + (c[:, None] - c[None, :] + window - 1)
    return table[index].transpose(2, 0, 1)  # (H, L, L)


class WindowAttention(Module):
    """One Swin block's attention: `grid` (height, width) tokens of `dim` features, `heads` heads. The names
    are the checkpoint's: self.{query,key,value}, self.relative_position_bias_table, output.dense."""

    OPS = ("embed", "matmul", "binary", "attention_dense")

    def __init__(self, backend, dim: int, heads: int, grid: tuple[int, int], window: int, shift: int, layer):
        height, width = grid
        if min(grid) <= window:  # Swin: a grid no larger than a window is one window, not shifted
            window, shift = min(grid), 0
        if height % window or width % window:
            raise UnsupportedError(
                f"Swin grid {height}x{width} is not a whole number of {window}x{window} windows"
            )
        self.be, self.dim, self.heads, self.layer = backend, dim, heads, layer
        self.grid, self.window, self.shift = (height, width), window, shift
        self.head_dim, self.area = dim // heads, window * window
        self.q = self.q_extra = self.k = self.k_extra = self.v = self.v_bias = None
        self.out = self.out_bias = self.order = self.unorder = self.lens = None

    def declare(self) -> Iterator[Weight]:
        d, side = self.dim, 2 * self.window - 1
        for name in ("query", "key", "value"):
            yield weight(name, f"self.{name}.weight", (d, d))
            yield weight(f"{name}_bias", f"self.{name}.bias", (d,))
        yield weight("table", "self.relative_position_bias_table", (side * side, self.heads))
        yield weight("out", "output.dense.weight", (d, d))  # (D, D)
        yield weight("out_bias", "output.dense.bias", (d,))

    def load(self, get, upload, prefix: str = "") -> None:
        """The checkpoint's tensors become the widened q/k projections and their constant extra features."""
        t = {w.attr: host_array(get(prefix + w.names[0])).astype(np.float32) for w in self.declare()}
        h, dh, area = self.heads, self.head_dim, self.area
        order = window_order(*self.grid, self.window, self.shift)  # (T,)
        windows = len(order) // area
        bias = (
            relative_bias(t["table"], self.window)[None]
            + shift_mask(*self.grid, self.window, self.shift)[:, None]
        )  # (windows, H, L, L)
        place = np.arange(len(order)) % area  # (T,) each token's place in its window
        q_extra = np.zeros((len(order), h, dh + area), np.float32)  # (T, H, Dh + L)
        q_extra[:, :, :dh] = t["query_bias"].reshape(h, dh)
        q_extra[np.arange(len(order)), :, dh + place] = 1.0
        k_extra = np.zeros_like(q_extra)
        k_extra[:, :, :dh] = t["key_bias"].reshape(h, dh)
        by_key = bias.transpose(0, 3, 1, 2).reshape(len(order), h, area)  # (T, H, L): key j's column
        k_extra[:, :, dh:] = by_key * np.sqrt(dh)  # divided by the score scale dh^-0.5
        self.q, self.k = upload(self._widen(t["query"])), upload(self._widen(t["key"]))  # (H (Dh + L), D)
        self.q_extra = upload(q_extra.reshape(len(order), -1))  # (T, H (Dh + L))
        self.k_extra = upload(k_extra.reshape(len(order), -1))
        self.v, self.v_bias = upload(t["value"]), upload(t["value_bias"])
        self.out, self.out_bias = upload(t["out"]), upload(t["out_bias"])
        self.order, self.unorder = self.be.upload(order), self.be.upload(np.argsort(order).astype(np.int32))
        self.lens = self.be.upload(np.full(windows, area, dtype=np.int32))

    def _widen(self, w: np.ndarray) -> np.ndarray:
        """(D, D) -> (H (Dh + L), D): each head's rows followed by L zero rows."""
        h, dh = self.heads, self.head_dim
        out = np.zeros((h, dh + self.area, self.dim), np.float32)
        out[:, :dh] = w.reshape(h, dh, self.dim)
        return out.reshape(-1, self.dim)

    def __call__(self, x: Array) -> Array:
        """x (T, D) in grid order -> (T, D) in grid order."""
        be, h, dh, t = self.be, self.heads, self.head_dim, self.grid[0] * self.grid[1]
        xw = be.embed(x, self.order)  # (T, D) window order
        q = be.binary("add", be.matmul(xw, self.q), self.q_extra).reshape(t, h, dh + self.area)
        k = be.binary("add", be.matmul(xw, self.k), self.k_extra).reshape(t, h, dh + self.area)
        v = be.binary("add", be.matmul(xw, self.v), self.v_bias).reshape(t, h, dh)
        att = be.attention_dense(q, k, v, self.lens, self.lens, dh**-0.5)  # (T, H, Dh)
        trace("window_attn", self.layer, att)
        out = be.binary("add", be.matmul(att.reshape(t, self.dim), self.out), self.out_bias)  # (T, D)
        return be.embed(out, self.unorder)  # (T, D) grid order
