"""Feed-forward layers."""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.base import Array, trace
from blazr.models.layers.module import Module, Weight, fused, weight


class GatedMLP(Module):
    """down(act(gate(x)) * up(x)): SwiGLU (SiLU) and GeGLU (GELU, GELU-tanh). gate_proj and up_proj are one
    (2F, D) matrix, so one matmul computes both; `fused_gate_up` names a checkpoint that stores them as one
    tensor, gate rows first (Phi-3's "gate_up_proj")."""

    OPS = ("matmul", "glu", "binary")
    LINEARS = ("gate_up_proj", "down_proj")

    def __init__(
        self,
        backend,
        hidden: int,
        ffn: int,
        act: str,
        layer: int,
        bias: bool = False,
        fused_gate_up: str | None = None,
        names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
        down_bias: bool | None = None,
    ):
        self.be, self.hidden, self.ffn, self.act, self.layer = backend, hidden, ffn, act, layer
        self.bias, self.fused_gate_up = bias, fused_gate_up
        # whether down_proj has a bias: as gate/up unless said (GTE's down_proj alone has one)
        self.has_down_bias = bias if down_bias is None else down_bias
        self.names = names  # the checkpoint's (gate, up, down) projections (InternLM2: w1, w3, w2)
        self.gate_up_proj = self.gate_up_bias = self.down_proj = self.down_bias = None

    def declare(self) -> Iterator[Weight]:
        (gate, up, down), d, f = self.names, self.hidden, self.ffn
        if self.fused_gate_up is not None:
            yield weight("gate_up_proj", f"{self.fused_gate_up}.weight", (2 * f, d))  # (2F, D)
        else:
            yield fused("gate_up_proj", [(f"{gate}.weight", (f, d)), (f"{up}.weight", (f, d))])  # (2F, D)
        yield weight("down_proj", f"{down}.weight", (d, f))  # (D, F)
        if self.bias:
            if self.fused_gate_up is not None:
                yield weight("gate_up_bias", f"{self.fused_gate_up}.bias", (2 * f,))
            else:
                yield fused("gate_up_bias", [(f"{gate}.bias", (f,)), (f"{up}.bias", (f,))])  # (2F,)
        if self.has_down_bias:
            yield weight("down_bias", f"{down}.bias", (d,))

    def __call__(self, x: Array) -> Array:
        be, f = self.be, self.ffn
        gate_up = self.linear(x, "gate_up_proj")  # (T, 2F)
        if self.gate_up_bias is not None:
            gate_up = be.binary("add", gate_up, self.gate_up_bias)
        trace("ffn_gate_up", self.layer, gate_up)
        h = be.glu(gate_up[:, :f], gate_up[:, f:], self.act)  # (T, F)
        trace("ffn_act", self.layer, h)
        out = self.linear(h, "down_proj")  # (T, D)
        return out if self.down_bias is None else be.binary("add", out, self.down_bias)


class MLP(Module):
    """down(act(up(x))), with biases or without: Phi-2 ("fc1"/"fc2"), StarCoder2 ("c_fc"/"c_proj"), GPT-NeoX
    ("dense_h_to_4h"/"dense_4h_to_h"), Falcon, Nemotron-H (act "relu2": relu(x)^2). `names` are the
    checkpoint's (up, down) projections."""

    OPS = ("matmul", "act", "binary")
    LINEARS = ("up_proj", "down_proj")

    def __init__(
        self,
        backend,
        hidden: int,
        ffn: int,
        act: str,
        layer: int,
        bias: bool = True,
        names: tuple[str, str] = ("up_proj", "down_proj"),
    ):
        self.be, self.hidden, self.ffn, self.act, self.layer = backend, hidden, ffn, act, layer
        self.bias, self.names = bias, names
        self.up_proj = self.up_bias = self.down_proj = self.down_bias = None

    def declare(self) -> Iterator[Weight]:
        (up, down), d, f = self.names, self.hidden, self.ffn
        yield weight("up_proj", f"{up}.weight", (f, d))  # (F, D)
        yield weight("down_proj", f"{down}.weight", (d, f))  # (D, F)
        if self.bias:
            yield weight("up_bias", f"{up}.bias", (f,))
            yield weight("down_bias", f"{down}.bias", (d,))

    def __call__(self, x: Array) -> Array:
        be = self.be
        h = self.linear(x, "up_proj")  # (T, F)
        if self.up_bias is not None:
            h = be.binary("add", h, self.up_bias)
        if self.act == "relu2":  # Nemotron-H's squared ReLU
            h = be.act(h, "relu")  # (T, F)
            h = be.binary("mul", h, h)
        else:
            h = be.act(h, self.act)  # (T, F)
        trace("ffn_act", self.layer, h)
        out = self.linear(h, "down_proj")  # (T, D)
        return out if self.down_bias is None else be.binary("add", out, self.down_bias)
