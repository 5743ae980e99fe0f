"""VITS's text encoder (`enc_p`): phoneme embeddings through post-norm transformer layers whose attention adds
Shaw-style relative position keys and values within a window, then a projection to the prior's mean and
log-scale per phoneme. Activations are (T, C) rows here; the feed-forward convolutions run channels-first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from blazr.models.base import Array, trace
from blazr.models.layers.conv import Conv1d
from blazr.models.layers.module import Module, Weight, fused, weight
from blazr.models.layers.norm import LayerNorm

EPS = 1e-5  # VITS's modules.LayerNorm


class RelativeAttention(Module):
    """Multi-head self-attention of one sequence with relative keys/values shared by the heads (window W:
    offsets -W..W, zero beyond). 1x1 convolutions as matmuls: weights (C, C) after the model's sanitize."""

    OPS = ("matmul", "binary", "attention_relative")

    def __init__(self, be, channels: int, heads: int, window: int):
        self.be, self.c, self.heads, self.window = be, channels, heads, window
        self.head_dim = channels // heads
        self.qkv = self.qkv_bias = self.o = self.o_bias = None  # (3C, C), (3C,), (C, C), (C,)
        self.rel_k = self.rel_v = None  # (2W + 1, Dh) each

    def declare(self) -> Iterator[Weight]:
        c, rel = self.c, (2 * self.window + 1, self.head_dim)
        yield fused("qkv", [(f"conv_{n}.weight", (c, c)) for n in "qkv"])
        yield fused("qkv_bias", [(f"conv_{n}.bias", (c,)) for n in "qkv"])
        yield weight("o", "conv_o.weight", (c, c))
        yield weight("o_bias", "conv_o.bias", (c,))
        yield weight("rel_k", "emb_rel_k", rel)
        yield weight("rel_v", "emb_rel_v", rel)

    def __call__(self, x: Array) -> Array:
        """x (T, C) -> (T, C)."""
        be, c, t = self.be, self.c, x.shape[0]
        qkv = be.binary("add", be.matmul(x, self.qkv), self.qkv_bias)  # (T, 3C)
        q, k, v = (qkv[:, i * c : (i + 1) * c].reshape(t, self.heads, self.head_dim) for i in range(3))
        scale = 1.0 / math.sqrt(self.head_dim)
        out = be.attention_relative(q, k, v, self.rel_k, self.rel_v, scale)  # (T, H, Dh)
        return be.binary("add", be.matmul(out.reshape(t, c), self.o), self.o_bias)  # (T, C)


class FeedForward(Module):
    """conv (K) -> ReLU -> conv (K), "same" padding, on the channels-first view of x."""

    OPS = ("act", "transpose")

    def __init__(self, be, channels: int, filters: int, kernel: int):
        self.be = be
        self.conv_1 = Conv1d(be, channels, filters, kernel)
        self.conv_2 = Conv1d(be, filters, channels, kernel)

    def children(self) -> dict[str, Module]:
        return {"conv_1.": self.conv_1, "conv_2.": self.conv_2}

    def __call__(self, x: Array) -> Array:
        """x (T, C) -> (T, C)."""
        be = self.be
        h = be.act(self.conv_1(be.transpose(x)), "relu")  # (F, T)
        return be.transpose(self.conv_2(h))  # (T, C)


class TextEncoder(Module):
    """ids (T,) -> the encoder output x (T, C) and the prior's statistics (T, 2 * C_inter): mean, log-scale."""

    OPS = ("embed", "binary", "matmul")

    def __init__(self, be, a):
        self.be, self.a = be, a
        c = a.hidden_channels
        self.attn = [
            RelativeAttention(be, c, a.num_attention_heads, a.window_size) for _ in range(a.num_hidden_layers)
        ]
        self.ffn = [FeedForward(be, c, a.ffn_dim, a.ffn_kernel_size) for _ in range(a.num_hidden_layers)]
        eps = getattr(a, "layer_norm_eps", EPS)
        self.norm_1 = [LayerNorm(be, c, eps) for _ in range(a.num_hidden_layers)]
        self.norm_2 = [LayerNorm(be, c, eps) for _ in range(a.num_hidden_layers)]
        self.emb = self.proj = self.proj_bias = self.emb_scale = None  # (V, C), (2I, C), (2I,), (1,)

    def declare(self) -> Iterator[Weight]:
        a = self.a
        yield weight("emb", "emb.weight", (a.vocab_size, a.hidden_channels))
        yield weight("proj", "proj.weight", (2 * a.flow_size, a.hidden_channels))
        yield weight("proj_bias", "proj.bias", (2 * a.flow_size,))

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {}
        for i in range(self.a.num_hidden_layers):
            out |= {f"encoder.attn_layers.{i}.": self.attn[i], f"encoder.ffn_layers.{i}.": self.ffn[i]}
            out |= {
                f"encoder.norm_layers_1.{i}.": self.norm_1[i],
                f"encoder.norm_layers_2.{i}.": self.norm_2[i],
            }
        return out

    def __call__(self, ids: Array, emb_scale: Array) -> tuple[Array, Array]:
        """ids (T,) int32, emb_scale (1,) = sqrt(C) -> x (T, C), stats (T, 2I)."""
        be = self.be
        x = be.binary("mul", be.embed(self.emb, ids), emb_scale)  # (T, C)
        for i in range(self.a.num_hidden_layers):
            x = self.norm_1[i](be.binary("add", x, self.attn[i](x)))  # (T, C)
            x = self.norm_2[i](be.binary("add", x, self.ffn[i](x)))  # (T, C)
            trace("vits_text", i, x)
        stats = be.binary("add", be.matmul(x, self.proj), self.proj_bias)  # (T, 2I)
        return x, stats
