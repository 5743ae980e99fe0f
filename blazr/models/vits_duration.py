"""VITS's stochastic duration predictor (`dp`), run in reverse: noise (2, T) through its flows, conditioned on
the text encoder's output, gives each phoneme's log-duration in frames. Models trained without it (VITS's
use_sdp=False, some MMS-TTS checkpoints) have the deterministic DurationPredictor instead. A speaker
embedding g (E, 1), where the model has one, is added to the input through a 1x1 `cond` convolution.

The convolution stacks (dilated depthwise-separable, DDSConv) run on the backend; each flow's spline and
the flips and affine steps run on the host over the 2 x T values (vits_spline says why).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from blazr.models.base import Array
from blazr.models.layers.conv import ChannelLayerNorm, Conv1d
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.vits_spline import spline_inverse


class DDSConv(Module):
    """Dilated depthwise-separable convolutions (dilation K^i), each: conv, norm, GELU, 1x1, norm, GELU,
    added to its input. An optional conditioning g is added to the input first."""

    OPS = ("act", "binary")

    def __init__(self, be, channels: int, kernel: int, n_layers: int):
        self.be, self.n = be, n_layers
        self.sep = [
            Conv1d(be, channels, channels, kernel, dilation=kernel**i, groups=channels)
            for i in range(n_layers)
        ]
        self.pointwise = [Conv1d(be, channels, channels, 1) for _ in range(n_layers)]
        self.norms_1 = [ChannelLayerNorm(be, channels) for _ in range(n_layers)]
        self.norms_2 = [ChannelLayerNorm(be, channels) for _ in range(n_layers)]

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {}
        for i in range(self.n):
            out |= {f"convs_sep.{i}.": self.sep[i], f"convs_1x1.{i}.": self.pointwise[i]}
            out |= {f"norms_1.{i}.": self.norms_1[i], f"norms_2.{i}.": self.norms_2[i]}
        return out

    def __call__(self, x: Array, g: Array | None = None) -> Array:
        """x (C, T), g (C, T) or None -> (C, T)."""
        be = self.be
        x = x if g is None else be.binary("add", x, g)
        for i in range(self.n):
            y = be.act(self.norms_1[i](self.sep[i](x)), "gelu")  # (C, T)
            y = be.act(self.norms_2[i](self.pointwise[i](y)), "gelu")  # (C, T)
            x = be.binary("add", x, y)
        return x


class ConvFlow(Module):
    """A coupling step: channel 0 (through a DDSConv conditioned on the text) parametrises a spline of
    channel 1."""

    def __init__(self, be, filters: int, kernel: int, n_layers: int, bins: int, tail_bound: float):
        self.be, self.filters, self.bins, self.tail_bound = be, filters, bins, tail_bound
        self.pre = Conv1d(be, 1, filters, 1)
        self.convs = DDSConv(be, filters, kernel, n_layers)
        self.proj = Conv1d(be, filters, 3 * bins - 1, 1)

    def children(self) -> dict[str, Module]:
        return {"pre.": self.pre, "convs.": self.convs, "proj.": self.proj}

    def reverse(self, z: np.ndarray, cond: Array) -> np.ndarray:
        """z (2, T) host, cond (C, T) -> (2, T) host."""
        be, k = self.be, self.bins
        h = self.proj(self.convs(self.pre(be.upload(np.ascontiguousarray(z[:1]))), cond))  # (3K - 1, T)
        params = be.download(h).T.astype(np.float32)  # (T, 3K - 1)
        scale = np.float32(math.sqrt(self.filters))
        widths, heights = params[:, :k] / scale, params[:, k : 2 * k] / scale
        x1 = spline_inverse(z[1], widths, heights, params[:, 2 * k :], self.tail_bound)
        return np.stack([z[0], x1])


class StochasticDurationPredictor(Module):
    """x (C, T) from the text encoder + noise (2, T) -> log-durations (T,). Flows stored as
    [affine, (ConvFlow, Flip) x n]; reversed, the first ConvFlow is skipped (VITS drops it at inference,
    so exports leave it out)."""

    def __init__(self, be, a):
        self.be, self.a = be, a
        c, k, n = a.hidden_channels, a.duration_predictor_kernel_size, a.depth_separable_num_layers
        self.pre, self.proj = Conv1d(be, c, c, 1), Conv1d(be, c, c, 1)
        self.convs = DDSConv(be, c, k, n)
        bins, bound = a.duration_predictor_flow_bins, a.duration_predictor_tail_bound
        self.flows = {
            2 * i + 1: ConvFlow(be, c, k, n, bins, bound) for i in range(1, a.duration_predictor_num_flows)
        }
        self.cond = Conv1d(be, a.speaker_embedding_size, c, 1) if a.speaker_embedding_size else None
        self.m = self.logs = None  # (2, 1) each, host: the affine flow

    def declare(self) -> Iterator[Weight]:
        yield weight("m", "flows.0.m", (2, 1))
        yield weight("logs", "flows.0.logs", (2, 1))

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"pre.": self.pre, "convs.": self.convs, "proj.": self.proj}
        out |= {"cond.": self.cond} if self.cond is not None else {}
        return out | {f"flows.{i}.": flow for i, flow in self.flows.items()}

    def __call__(self, x: Array, noise: np.ndarray, g: Array | None = None) -> np.ndarray:
        """x (C, T), noise (2, T) host (already times noise_w), g (E, 1) or None -> log-durations (T,) host."""
        x = self.pre(x)
        if g is not None and self.cond is not None:
            x = self.be.binary("add", x, self.cond(g))  # (C, T) + (C, 1)
        cond = self.proj(self.convs(x))  # (C, T)
        z = noise.astype(np.float32)
        for i in sorted(self.flows, reverse=True):
            z = self.flows[i].reverse(z[::-1].copy(), cond)  # a Flip, then the flow
        z = z[::-1]  # the Flip after the skipped first ConvFlow
        m, logs = self.be.download(self.m), self.be.download(self.logs)  # (2, 1) each
        z = (z - m) * np.exp(-logs)  # the affine flow, reversed
        return z[0].astype(np.float32)


class DurationPredictor(Module):
    """The deterministic predictor: x (C, T) -> log-durations (T,) through two convolutions, each followed
    by ReLU and a LayerNorm over channels, then a 1x1 projection to one channel. Noise is not read."""

    OPS = ("act", "binary")

    def __init__(self, be, a):
        self.be = be
        c, f, k = a.hidden_channels, a.duration_predictor_filter_channels, a.duration_predictor_kernel_size
        self.conv_1, self.conv_2 = Conv1d(be, c, f, k, pad=k // 2), Conv1d(be, f, f, k, pad=k // 2)
        self.norm_1, self.norm_2 = (
            ChannelLayerNorm(be, f, a.layer_norm_eps),
            ChannelLayerNorm(be, f, a.layer_norm_eps),
        )
        self.proj = Conv1d(be, f, 1, 1)
        self.cond = Conv1d(be, a.speaker_embedding_size, c, 1) if a.speaker_embedding_size else None

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"conv_1.": self.conv_1, "norm_1.": self.norm_1, "conv_2.": self.conv_2}
        out |= {"norm_2.": self.norm_2, "proj.": self.proj}
        return out | ({"cond.": self.cond} if self.cond is not None else {})

    def __call__(self, x: Array, noise: np.ndarray | None = None, g: Array | None = None) -> np.ndarray:
        """x (C, T), g (E, 1) or None -> log-durations (T,) host."""
        be = self.be
        if g is not None and self.cond is not None:
            x = be.binary("add", x, self.cond(g))  # (C, T) + (C, 1)
        x = self.norm_1(be.act(self.conv_1(x), "relu"))  # (F, T)
        x = self.norm_2(be.act(self.conv_2(x), "relu"))  # (F, T)
        return be.download(self.proj(x))[0].astype(np.float32)  # (T,)
