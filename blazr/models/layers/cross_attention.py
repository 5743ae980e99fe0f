"""Attention layers of an encoder-decoder (Whisper): the decoder's cached self-attention and its attention
over the encoder's output (cross-attention).

Both keep their keys and values in caches the task allocates (blazr.models.whisper_cache.WhisperCache):
self-attention in paged blocks per decoded sequence (kv_write + attention, as the causal-LM engine does),
cross-attention as one block of encoder positions per audio window, written once when the window is encoded
and read by every token and beam of that window.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from blazr.models.base import Array
from blazr.models.layers.module import Module, Weight, fused, weight


class _Projections(Module):
    """q/k/v/out projections with biases, named `{q,k,v,out}_proj` as transformers' Whisper names them. The k
    bias (absent in Whisper checkpoints) is zero: the family's sanitize() adds it so q/k/v fuse into one."""

    def __init__(self, backend, hidden: int, heads: int, layer: int):
        self.be, self.hidden, self.heads, self.layer = backend, hidden, heads, layer
        self.head_dim = hidden // heads

    def _out(self, att: Array) -> Array:
        be = self.be
        t = att.shape[0]
        return be.binary("add", be.matmul(att.reshape(t, self.hidden), self.out), self.out_bias)  # (T, D)


class CachedSelfAttention(_Projections):
    """Causal self-attention of the decoded tokens over the sequence's cached keys and values."""

    OPS = ("matmul", "binary", "kv_write", "attention")

    def declare(self) -> Iterator[Weight]:
        d = self.hidden
        yield fused("qkv", [(f"{n}_proj.weight", (d, d)) for n in "qkv"])  # (3D, D)
        yield fused("qkv_bias", [(f"{n}_proj.bias", (d,)) for n in "qkv"])  # (3D,)
        yield weight("out", "out_proj.weight", (d, d))  # (D, D)
        yield weight("out_bias", "out_proj.bias", (d,))  # (D,)

    def __call__(self, x: Array, cache, step) -> Array:
        """x (T, D) of the step's tokens (rows of `step.q_lens` per sequence) -> (T, D); writes their k/v."""
        be, h, dh = self.be, self.heads, self.head_dim
        qkv = be.binary("add", be.matmul(x, self.qkv), self.qkv_bias)  # (T, 3D)
        qkv = qkv.reshape(qkv.shape[0], 3 * h, dh)  # (T, 3H, Dh)
        q, k, v = qkv[:, :h], qkv[:, h : 2 * h], qkv[:, 2 * h :]  # (T, H, Dh) each
        k_cache, v_cache = cache.self_kv[self.layer]  # (S, H, Dh) each
        be.kv_write(k_cache, v_cache, k, v, step.slots)
        att = be.attention(
            q, k_cache, v_cache, step.block_tables, step.ctx_lens, step.q_lens_dev, cache.block_size, dh**-0.5
        )  # (T, H, Dh)
        return self._out(att)


class CrossAttention(_Projections):
    """Attention of the decoded tokens over their audio window's encoder output (every position: the audio
    is all there before decoding starts)."""

    OPS = ("matmul", "binary", "kv_write", "attention", "attention_dense")

    def declare(self) -> Iterator[Weight]:
        d = self.hidden
        yield weight("q", "q_proj.weight", (d, d))  # (D, D)
        yield weight("q_bias", "q_proj.bias", (d,))  # (D,)
        yield fused("kv", [(f"{n}_proj.weight", (d, d)) for n in "kv"])  # (2D, D)
        yield fused("kv_bias", [(f"{n}_proj.bias", (d,)) for n in "kv"])  # (2D,)
        yield weight("out", "out_proj.weight", (d, d))  # (D, D)
        yield weight("out_bias", "out_proj.bias", (d,))  # (D,)

    def write(self, encoded: Array, cache, slots: Array) -> None:
        """Project one window's encoder output (P, D) to keys and values and store them at `slots` (P,)."""
        be, h, dh = self.be, self.heads, self.head_dim
        kv = be.binary("add", be.matmul(encoded, self.kv), self.kv_bias)  # (P, 2D)
        kv = kv.reshape(kv.shape[0], 2 * h, dh)  # (P, 2H, Dh)
        k_cache, v_cache = cache.cross_kv[self.layer]  # (W * rows per window, H, Dh) each
        be.kv_write(k_cache, v_cache, kv[:, :h], kv[:, h:], slots)

    def queries(self, x: Array) -> Array:
        """(T, D) -> the scaled-later queries (T, H, Dh); word alignment reads them too."""
        be = self.be
        q = be.binary("add", be.matmul(x, self.q), self.q_bias)  # (T, D)
        return q.reshape(q.shape[0], self.heads, self.head_dim)

    def __call__(self, x: Array, cache, step) -> Array:
        """x (T, D) -> (T, D). A step of one token per row reads its window's keys through the paged
        kernel (a window's beams share its blocks, and every encoder position is "before" the query);
        a step of several tokens (a prompt) must be one window's, and runs dense attention over it."""
        be, q = self.be, self.queries(x)  # (T, H, Dh)
        if step.capture:
            cache.captured[self.layer] = q
        if step.one_token_each:
            k_cache, v_cache = cache.cross_kv[self.layer]  # (W * rows per window, H, Dh)
            att = be.attention(
                q,
                k_cache,
                v_cache,
                step.cross_tables,
                step.cross_ctx,
                step.q_lens_dev,
                cache.block_size,
                self.head_dim**-0.5,
            )  # (T, H, Dh)
            return self._out(att)
        if len(set(step.windows.tolist())) != 1:
            raise ValueError("a Whisper step of several tokens per row must hold one window's rows")
        k, v = cache.cross_keys(self.layer, int(step.windows[0]))  # (P, H, Dh) each
        lens = (
            be.upload(np.array([q.shape[0]], dtype=np.int32)),
            be.upload(np.array([k.shape[0]], dtype=np.int32)),
        )
        att = be.attention_dense(q, k, v, *lens, self.head_dim**-0.5)  # (T, H, Dh)
        return self._out(att)
