"""Normalisation layers: RMSNorm and LayerNorm (with or without bias) over the last axis."""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.base import Array
from blazr.models.layers.module import Module, Weight, weight


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * w. Gemma's (1 + w) is folded into w at load by the family's sanitize."""

    OPS = ("rms_norm",)

    def __init__(self, backend, dim: int, eps: float):
        self.be, self.dim, self.eps = backend, dim, eps
        self.weight = None  # (D,)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.dim,))

    def __call__(self, x: Array) -> Array:
        return self.be.rms_norm(x, self.weight, self.eps)  # (T, D)


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * w (+ b): Phi-2, GPT-NeoX and Falcon with a bias, Command-R without."""

    OPS = ("layer_norm",)

    def __init__(self, backend, dim: int, eps: float, bias: bool = True):
        self.be, self.dim, self.eps, self.has_bias = backend, dim, eps, bias
        self.weight = self.bias = None  # (D,), (D,) or None

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.dim,))
        if self.has_bias:
            yield weight("bias", "bias", (self.dim,))

    def __call__(self, x: Array) -> Array:
        return self.be.layer_norm(x, self.weight, self.bias, self.eps)  # (T, D)
