"""GPT-OSS's mixture of experts: a router with a bias, experts with biases, and a clamped SwiGLU.

Per token: logits = router(x) + bias; the k largest, softmaxed among themselves (the same weights as the
renormalised top k of a softmax over every expert); each chosen expert computes
gate, up = gate_up(x) + b (gate and up rows as declared below), gate = min(gate, limit),
up = clamp(up, -limit, limit), h = gate * sigmoid(alpha gate) * (up + 1), out = down(h) + b_down.
gate * sigmoid(alpha gate) is silu(alpha gate) / alpha, so the product runs as one glu of (alpha gate) and
(up + 1) / alpha. Experts stay packed in their GGUF blocks as SparseMoE's do (blazr.quant.experts).
"""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.base import Array, trace
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.moe import sum_columns, weighted_sum


class ClampedSwiGLUMoE(Module):
    OPS = ("matmul", "softmax", "topk", "matmul_experts", "glu", "binary", "embed")

    def __init__(
        self,
        backend,
        hidden: int,
        ffn: int,
        num_experts: int,
        top_k: int,
        layer: int,
        alpha: float,
        limit: float,
    ):
        self.be, self.hidden, self.ffn, self.layer = backend, hidden, ffn, layer
        self.num_experts, self.top_k, self.alpha, self.limit = num_experts, top_k, alpha, limit
        self.router = self.router_bias = self.gate_up_proj = self.gate_up_bias = None
        self.down_proj = self.down_bias = None

    def declare(self) -> Iterator[Weight]:
        e, d, f = self.num_experts, self.hidden, self.ffn
        yield weight("router", "router.weight", (e, d))  # (E, D)
        yield weight("router_bias", "router.bias", (e,))  # (E,)
        yield weight("gate_up_proj", "experts.gate_up_proj", (e, 2 * f, d))  # (E, 2F, D) gate rows first
        yield weight("gate_up_bias", "experts.gate_up_proj_bias", (e, 2 * f))  # (E, 2F)
        yield weight("down_proj", "experts.down_proj", (e, d, f))  # (E, D, F)
        yield weight("down_bias", "experts.down_proj_bias", (e, d))  # (E, D)

    def __call__(self, x: Array) -> Array:
        be, k, f = self.be, self.top_k, self.ffn
        t, d = x.shape
        logits = be.binary("add", be.matmul(x, self.router), self.router_bias)  # (T, E)
        weights, ids = be.topk(be.softmax(logits), k)  # (T, k) each, largest first
        weights = be.binary(
            "div", weights, sum_columns(be, weights)
        )  # (T, k): a softmax over the k chosen logits
        trace("ffn_moe_weights", self.layer, weights)
        flat = ids.reshape(t * k)  # (T k,) each pair's expert
        gate_up = be.matmul_experts(x, self.gate_up_proj, ids).reshape(t * k, 2 * f)  # (T k, 2F)
        gate_up = be.binary("add", gate_up, be.embed(self.gate_up_bias, flat))  # (T k, 2F)
        gate = be.binary("mul", be.binary("min", gate_up[:, :f], self.limit), self.alpha)  # (T k, F)
        up = be.binary("max", be.binary("min", gate_up[:, f:], self.limit), -self.limit)  # (T k, F)
        up = be.binary("mul", be.binary("add", up, 1.0), 1.0 / self.alpha)  # (T k, F)
        h = be.glu(gate, up, "silu")  # (T k, F)
        out = be.matmul_experts(h, self.down_proj, ids.reshape(t * k, 1)).reshape(t * k, d)  # (T k, D)
        out = be.binary("add", out, be.embed(self.down_bias, flat)).reshape(t, k, d)  # (T, k, D)
        y = weighted_sum(be, out, weights)  # (T, D)
        trace("ffn_moe_out", self.layer, y)
        return y
