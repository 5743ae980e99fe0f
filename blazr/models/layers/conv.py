"""Convolution layers over (channels, time) arrays: Conv1d, ConvTranspose1d and a LayerNorm over channels.

Speech networks (VITS, HiFi-GAN) keep activations channels-first, as PyTorch's Conv1d does; the weights keep
PyTorch's layouts too: Conv1d (C_out, C_in / groups, K), ConvTranspose1d (C_in, C_out / groups, K).
"""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.base import Array
from blazr.models.layers.module import Module, Weight, weight


class Conv1d(Module):
    """PyTorch Conv1d. pad None: "same" length for stride 1 (dilation * (K - 1) // 2 each side)."""

    OPS = ("conv1d",)

    def __init__(
        self,
        backend,
        c_in: int,
        c_out: int,
        kernel: int,
        *,
        stride: int = 1,
        pad: int | None = None,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        self.be, self.c_in, self.c_out, self.kernel = backend, c_in, c_out, kernel
        self.stride, self.dilation, self.groups, self.has_bias = stride, dilation, groups, bias
        self.pad = dilation * (kernel - 1) // 2 if pad is None else pad
        self.weight = self.bias = None  # (C_out, C_in / groups, K), (C_out,) or None

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.c_out, self.c_in // self.groups, self.kernel))
        if self.has_bias:
            yield weight("bias", "bias", (self.c_out,))

    def __call__(
        self, x: Array, pre_act: str | None = None, slope: float = 0.01, residual: Array | None = None
    ) -> Array:
        """x (C_in, L) -> (C_out, L_out); act(x) first when pre_act is given, residual (C_out, L_out) added
        (both fused into the backend's convolution)."""
        if pre_act is None and residual is None:
            return self.be.conv1d(
                x, self.weight, self.bias, self.stride, self.pad, self.groups, dilation=self.dilation
            )
        return self.be.conv1d(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.pad,
            self.groups,
            dilation=self.dilation,
            pre_act=pre_act,
            slope=slope,
            residual=residual,
        )


class ConvTranspose1d(Module):
    """PyTorch ConvTranspose1d without output padding: L_out = (L - 1) * stride - 2 * pad + K."""

    OPS = ("conv_transpose1d",)

    def __init__(self, backend, c_in: int, c_out: int, kernel: int, stride: int, pad: int):
        self.be, self.c_in, self.c_out, self.kernel, self.stride, self.pad = (
            backend,
            c_in,
            c_out,
            kernel,
            stride,
            pad,
        )
        self.weight = self.bias = None  # (C_in, C_out, K), (C_out,)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.c_in, self.c_out, self.kernel))
        yield weight("bias", "bias", (self.c_out,))

    def __call__(self, x: Array, pre_act: str | None = None, slope: float = 0.01) -> Array:
        """x (C_in, L) -> (C_out, L_out); act(x) first when pre_act is given (fused into the backend's op)."""
        if pre_act is None:
            return self.be.conv_transpose1d(x, self.weight, self.bias, self.stride, self.pad)
        return self.be.conv_transpose1d(
            x, self.weight, self.bias, self.stride, self.pad, pre_act=pre_act, slope=slope
        )


class ChannelLayerNorm(Module):
    """LayerNorm over the channels of a (C, T) array (VITS's modules.LayerNorm, its gamma and beta renamed
    weight and bias by the model's sanitize)."""

    OPS = ("layer_norm", "transpose")

    def __init__(self, backend, channels: int, eps: float = 1e-5):
        self.be, self.channels, self.eps = backend, channels, eps
        self.weight = self.bias = None  # (C,), (C,)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.channels,))
        yield weight("bias", "bias", (self.channels,))

    def __call__(self, x: Array) -> Array:
        """x (C, T) -> (C, T)."""
        be = self.be
        return be.transpose(be.layer_norm(be.transpose(x), self.weight, self.bias, self.eps))
