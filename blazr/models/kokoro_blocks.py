"""Kokoro's (StyleTTS2's) building blocks on backend ops: Linear, the style-conditioned norms (AdaIN1d over
channels, AdaLayerNorm over features), the bidirectional LSTM, and the two residual blocks (AdainResBlk1d,
and iSTFTNet's AdaINResBlock1 with its Snake activation).

A style vector s (1, S) is fixed for a whole utterance, so every style-dependent term is one small matmul:
an AdaIN's fc and its InstanceNorm affine are folded at load (Kokoro's sanitize, blazr/loaders/kokoro.py)
into one `affine` Linear whose output is [scale; shift] of backend.instance_norm, and an LSTM that reads
[x, s] keeps the style columns of W_ih apart, as a bias row computed once per call.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from blazr.models.base import Array
from blazr.models.layers.conv import Conv1d
from blazr.models.layers.module import Module, Weight, weight

_RSQRT2 = 1.0 / math.sqrt(2.0)  # AdainResBlk1d keeps unit variance: (residual + shortcut) / sqrt(2)


class Linear(Module):
    """x (T, I) -> x W^T + b (T, O)."""

    OPS = ("matmul", "binary")

    def __init__(self, be, d_in: int, d_out: int, bias: bool = True):
        self.be, self.d_in, self.d_out, self.has_bias = be, d_in, d_out, bias
        self.weight = self.bias = None  # (O, I), (O,)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.d_out, self.d_in))
        if self.has_bias:
            yield weight("bias", "bias", (self.d_out,))

    def __call__(self, x: Array) -> Array:
        y = self.be.matmul(x, self.weight)  # (T, O)
        return y if self.bias is None else self.be.binary("add", y, self.bias)


class AdaIN1d(Module):
    """InstanceNorm over time, then a per-channel scale and shift from the style: (C, L) -> (C, L)."""

    OPS = ("instance_norm",)

    def __init__(self, be, style: int, channels: int):
        self.be, self.c = be, channels
        self.affine = Linear(be, style, 2 * channels)  # s -> [scale; shift] (folded at load)

    def children(self) -> dict[str, Module]:
        return {"affine.": self.affine}

    def __call__(self, x: Array, s: Array) -> Array:
        h = self.affine(s)[0]  # (2C,)
        return self.be.instance_norm(x, h[: self.c], h[self.c :], 1e-5)


class AdaLayerNorm(Module):
    """LayerNorm over features without its own affine, then (1 + gamma) x + beta from the style: (T, C)."""

    OPS = ("layer_norm",)

    def __init__(self, be, style: int, channels: int):
        self.be, self.c = be, channels
        self.fc = Linear(be, style, 2 * channels)  # s -> [1 + gamma; beta] (the 1 folded into the bias)

    def children(self) -> dict[str, Module]:
        return {"fc.": self.fc}

    def __call__(self, x: Array, s: Array) -> Array:
        h = self.fc(s)[0]  # (2C,)
        return self.be.layer_norm(x, h[: self.c], h[self.c :], 1e-5)


class BiLSTM(Module):
    """nn.LSTM(bidirectional=True, batch_first) for one sequence: x (T, I) [+ the style s (1, S) as extra
    input columns] -> (T, 2H). Both directions' input weights are stacked into one (8H, I) matmul."""

    OPS = ("lstm", "matmul", "binary")

    def __init__(self, be, d_in: int, hidden: int, style: int = 0):
        self.be, self.d_in, self.h, self.style = be, d_in, hidden, style
        self.w_ih = self.w_style = self.bias = self.w_hh = None  # (8H, I), (8H, S), (8H,), (2, 4H, H)

    def declare(self) -> Iterator[Weight]:
        h = self.h
        yield weight("w_ih", "w_ih", (8 * h, self.d_in))
        if self.style:
            yield weight("w_style", "w_style", (8 * h, self.style))
        yield weight("bias", "bias", (8 * h,))
        yield weight("w_hh", "w_hh", (2, 4 * h, h))

    def __call__(self, x: Array, s: Array | None = None) -> Array:
        be = self.be
        bias = self.bias
        if self.style:
            bias = be.binary("add", be.matmul(s, self.w_style), bias)  # (1, 8H): the style's constant part
        gates = be.binary("add", be.matmul(x, self.w_ih), bias)  # (T, 8H)
        return be.lstm(gates, self.w_hh)  # (T, 2H)


class AdainResBlk1d(Module):
    """StyleTTS2's residual block over (C_in, L): AdaIN, LeakyReLU(0.2), [x2 transposed-conv upsampling],
    conv, AdaIN, LeakyReLU, conv; plus a shortcut ([nearest x2], [1x1 conv]); the sum over sqrt(2)."""

    OPS = ("act", "binary", "conv_transpose1d")

    def __init__(self, be, c_in: int, c_out: int, style: int, upsample: bool = False):
        self.be, self.c_in, self.upsample = be, c_in, upsample
        self.norm1, self.norm2 = AdaIN1d(be, style, c_in), AdaIN1d(be, style, c_out)
        self.conv1, self.conv2 = Conv1d(be, c_in, c_out, 3), Conv1d(be, c_out, c_out, 3)
        self.conv1x1 = Conv1d(be, c_in, c_out, 1, bias=False) if c_in != c_out else None
        # `pool`: depthwise ConvTranspose1d(k=3, stride=2, pad=1, output_padding=1), run with pad 0 and its
        # first column cut; `repeat2`: ones, nearest x2 as a depthwise transposed conv (made at load)
        self.pool_w = self.pool_b = self.repeat2 = None  # (C_in, 1, 3), (C_in,), (C_in, 1, 2)

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"norm1.": self.norm1, "norm2.": self.norm2}
        out |= {"conv1.": self.conv1, "conv2.": self.conv2}
        return out | ({"conv1x1.": self.conv1x1} if self.conv1x1 is not None else {})

    def declare(self) -> Iterator[Weight]:
        if self.upsample:
            yield weight("pool_w", "pool.weight", (self.c_in, 1, 3))
            yield weight("pool_b", "pool.bias", (self.c_in,))
            yield weight("repeat2", "repeat2", (self.c_in, 1, 2))

    def __call__(self, x: Array, s: Array) -> Array:
        """x (C_in, L), s (1, S) -> (C_out, L or 2L)."""
        be = self.be
        shortcut = x
        if self.upsample:
            shortcut = be.conv_transpose1d(x, self.repeat2, None, 2, 0, groups=self.c_in)  # (C_in, 2L)
        if self.conv1x1 is not None:
            shortcut = self.conv1x1(shortcut)  # (C_out, L')
        h = self.norm1(x, s)
        if self.upsample:
            h = be.act(h, "leaky_relu", slope=0.2)
            h = be.conv_transpose1d(h, self.pool_w, self.pool_b, 2, 0, groups=self.c_in)[:, 1:]  # (C_in, 2L)
            h = self.conv1(h)
        else:
            h = self.conv1(h, pre_act="leaky_relu", slope=0.2)  # (C_out, L)
        h = self.norm2(h, s)
        out = self.conv2(h, pre_act="leaky_relu", slope=0.2, residual=shortcut)
        return be.binary("mul", out, _RSQRT2)


class AdaINResBlock1(Module):
    """iSTFTNet's generator block over (C, L): three times x += conv2(snake(AdaIN(conv1(snake(AdaIN(x)))))),
    the first convolutions dilated 1, 3, 5 (or as configured), Snake1D x + sin(a x)^2 / a per channel."""

    OPS = ("snake",)

    def __init__(self, be, channels: int, kernel: int, dilations: list[int], style: int):
        self.be, self.c, self.n = be, channels, len(dilations)
        self.convs1 = [Conv1d(be, channels, channels, kernel, dilation=d) for d in dilations]
        self.convs2 = [Conv1d(be, channels, channels, kernel) for _ in dilations]
        self.adain1 = [AdaIN1d(be, style, channels) for _ in dilations]
        self.adain2 = [AdaIN1d(be, style, channels) for _ in dilations]

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {}
        for i in range(self.n):
            out |= {f"convs1.{i}.": self.convs1[i], f"convs2.{i}.": self.convs2[i]}
            out |= {f"adain1.{i}.": self.adain1[i], f"adain2.{i}.": self.adain2[i]}
        return out

    def declare(self) -> Iterator[Weight]:
        for i in range(self.n):
            yield weight(f"_alpha1_{i}", f"alpha1.{i}", (self.c,))
            yield weight(f"_alpha2_{i}", f"alpha2.{i}", (self.c,))

    def __call__(self, x: Array, s: Array) -> Array:
        """x (C, L), s (1, S) -> (C, L)."""
        be = self.be
        for i in range(self.n):
            h = be.snake(self.adain1[i](x, s), getattr(self, f"_alpha1_{i}"))
            h = be.snake(self.adain2[i](self.convs1[i](h), s), getattr(self, f"_alpha2_{i}"))
            x = self.convs2[i](h, residual=x)
        return x
