"""Feed-forward layers."""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.base import Array, trace
from blazr.models.layers.module import Module, Weight, fused, weight


class GatedMLP(Module):
    """down(act(gate(x)) * up(x)): SwiGLU (SiLU) and GeGLU (GELU, GELU-tanh). gate_proj and up_proj are one
    (2F, D) matrix, so one matmul computes both."""

    def __init__(self, backend, hidden: int, ffn: int, act: str, layer: int, bias: bool = False):
        self.be, self.hidden, self.ffn, self.act, self.layer, self.bias = (
            backend,
            hidden,
            ffn,
            act,
            layer,
            bias,
        )
        self.gate_up_proj = self.gate_up_bias = self.down_proj = self.down_bias = None

    def declare(self) -> Iterator[Weight]:
        d, f = self.hidden, self.ffn
        yield fused("gate_up_proj", [("gate_proj.weight", (f, d)), ("up_proj.weight", (f, d))])  # (2F, D)
        yield weight("down_proj", "down_proj.weight", (d, f))  # (D, F)
        if self.bias:
            yield fused("gate_up_bias", [("gate_proj.bias", (f,)), ("up_proj.bias", (f,))])  # (2F,)
            yield weight("down_bias", "down_proj.bias", (d,))

    def __call__(self, x: Array) -> Array:
        be, f = self.be, self.ffn
        gate_up = be.matmul(x, self.gate_up_proj)  # (T, 2F)
        if self.gate_up_bias is not None:
            gate_up = be.binary("add", gate_up, self.gate_up_bias)
        trace("ffn_gate_up", self.layer, gate_up)
        h = be.glu(gate_up[:, :f], gate_up[:, f:], self.act)  # (T, F)
        trace("ffn_act", self.layer, h)
        out = be.matmul(h, self.down_proj)  # (T, D)
        return out if self.down_bias is None else be.binary("add", out, self.down_bias)
