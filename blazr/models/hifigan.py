"""HiFi-GAN's generator (VITS's `dec`): latent frames (C, F) -> waveform (1, F * prod(upsample_rates)).

conv_pre, then per upsampling stage: LeakyReLU(0.1), a transposed convolution, and the mean of several
residual blocks with different kernels and dilations; then LeakyReLU(0.01), conv_post and tanh. Residual
blocks come in HiFi-GAN's two kinds: "1" (pairs of dilated and plain convolutions) and "2" (one dilated
convolution per step, as Piper's medium voices use).
"""

from __future__ import annotations

import numpy as np

from blazr.models.base import Array
from blazr.models.layers.conv import Conv1d, ConvTranspose1d
from blazr.models.layers.module import Module

SLOPE = 0.1  # LeakyReLU slope inside the generator (HiFi-GAN's LRELU_SLOPE)


class ResBlock(Module):
    def __init__(self, be, channels: int, kernel: int, dilations: list[int], kind: str, slope: float = SLOPE):
        self.be, self.kind, self.slope = be, kind, slope
        self.convs1 = [Conv1d(be, channels, channels, kernel, dilation=d) for d in dilations]
        self.convs2 = [Conv1d(be, channels, channels, kernel) for _ in dilations] if kind == "1" else []

    def children(self) -> dict[str, Module]:
        if self.kind == "2":
            return {f"convs.{i}.": c for i, c in enumerate(self.convs1)}
        out: dict[str, Module] = {f"convs1.{i}.": c for i, c in enumerate(self.convs1)}
        return out | {f"convs2.{i}.": c for i, c in enumerate(self.convs2)}

    def __call__(self, x: Array) -> Array:
        """x (C, L) -> (C, L)."""
        for i, conv in enumerate(self.convs1):
            if self.convs2:  # x += conv2(lrelu(conv1(lrelu(x))))
                y = conv(x, pre_act="leaky_relu", slope=self.slope)  # (C, L)
                x = self.convs2[i](y, pre_act="leaky_relu", slope=self.slope, residual=x)
            else:  # x += conv(lrelu(x))
                x = conv(x, pre_act="leaky_relu", slope=self.slope, residual=x)
        return x


class Generator(Module):
    OPS = ("act", "binary")

    def __init__(self, be, a):
        self.be, self.slope = be, getattr(a, "leaky_relu_slope", SLOPE)
        rates, kernels, c0 = a.upsample_rates, a.upsample_kernel_sizes, a.upsample_initial_channel
        self.conv_pre = Conv1d(be, a.flow_size, c0, 7)
        self.ups = [
            ConvTranspose1d(be, c0 >> i, c0 >> (i + 1), k, u, (k - u) // 2)
            for i, (u, k) in enumerate(zip(rates, kernels, strict=True))
        ]
        self.blocks = [
            ResBlock(be, c0 >> (i + 1), k, list(d), a.resblock, self.slope)
            for i in range(len(rates))
            for k, d in zip(a.resblock_kernel_sizes, a.resblock_dilation_sizes, strict=True)
        ]
        self.per_stage = len(a.resblock_kernel_sizes)
        self.conv_post = Conv1d(be, c0 >> len(rates), 1, 7, bias=False)
        speaker = getattr(a, "speaker_embedding_size", 0)
        self.cond = (
            Conv1d(be, speaker, c0, 1) if speaker else None
        )  # a speaker embedding, added after conv_pre

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"conv_pre.": self.conv_pre, "conv_post.": self.conv_post}
        out |= {f"ups.{i}.": up for i, up in enumerate(self.ups)}
        out |= {"cond.": self.cond} if self.cond is not None else {}
        return out | {f"resblocks.{i}.": block for i, block in enumerate(self.blocks)}

    def __call__(self, z: Array, g: Array | None = None) -> Array:
        """z (C, F), g (E, 1) or None -> (1, F * prod(rates)) in [-1, 1]."""
        be = self.be
        x = self.conv_pre(z)  # (C0, F)
        if g is not None and self.cond is not None:
            x = be.binary("add", x, self.cond(g))  # (C0, F) + (C0, 1)
        for i, up in enumerate(self.ups):
            x = up(x, pre_act="leaky_relu", slope=self.slope)  # (C0 / 2^(i+1), L * rate)
            blocks = self.blocks[i * self.per_stage : (i + 1) * self.per_stage]
            x_blocks = blocks[0](x)
            for block in blocks[1:]:
                x_blocks = be.binary("add", x_blocks, block(x))
            x = x_blocks  # the blocks' sum: their mean's 1 / per_stage is in the next weights (fold_stage_mean)
        x = self.conv_post(x, pre_act="leaky_relu", slope=0.01)  # (1, L)
        return be.act(x, "tanh")


def fold_stage_mean(weights: dict[str, np.ndarray], prefix: str, stages: int, per_stage: int) -> dict:
    """The weights that take each stage's mean of its residual blocks out of the running network: what follows
    a stage is LeakyReLU then a convolution (the next upsampler, or conv_post), and LeakyReLU(x / n) =
    LeakyReLU(x) / n, so the 1 / n moves into that convolution's weight (not its bias). One pass over
    HiFi-GAN's largest arrays fewer per stage. Returns the changed entries (new arrays)."""
    scale = np.float32(1.0 / per_stage)
    names = [f"{prefix}ups.{i}.weight" for i in range(1, stages)] + [f"{prefix}conv_post.weight"]
    return {name: np.asarray(weights[name], dtype=np.float32) * scale for name in names}
