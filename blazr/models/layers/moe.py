"""Sparse mixture-of-experts feed-forward: a router picks k of E gated MLPs per token (Mixtral, Qwen2-MoE, OLMoE).

The experts' weights are two 3-D arrays, (E, 2F, D) gate/up rows and (E, D, F) down, as transformers 5 holds
them (`experts.gate_up_proj`, `experts.down_proj`), so `matmul_experts` runs every (token, expert) pair in one
op. Checkpoints on disk keep one 2-D tensor per expert and projection (the layout transformers'
`from_pretrained` converts at load, and llama.cpp's converter reads); GGUF files hold one 3-D tensor per
projection. `stack_experts` turns either into the declared pair before the strict load; quantized experts stay
in their blocks (blazr.quant.experts.QuantExperts), and the backend multiplies each active expert packed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, ConfigError
from blazr.models.base import Array, trace
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.router import Routing, route_groups
from blazr.models.layers.stacked_experts import StackedExperts


class SparseMoE(Module):
    """sum over the k experts the router picks of weight * down(act(gate(x)) * up(x)), plus an optional shared
    expert scaled by sigmoid(shared_expert_gate(x)) (Qwen2-MoE).

    Routing: softmax over all E router logits, the k largest probabilities, and with `norm_topk_prob` those
    k divided by their sum (Mixtral always renormalises; Qwen2-MoE and OLMoE when their config says so)."""

    def __init__(
        self,
        backend,
        hidden: int,
        ffn: int,
        num_experts: int,
        top_k: int,
        act: str,
        layer: int,
        norm_topk_prob: bool,
        shared_ffn: int = 0,
        routing: Routing | None = None,
        shared_name: str = "shared_expert.",
        shared_gated: bool = True,
        score_bias: bool = False,
    ):
        self.be, self.hidden, self.ffn, self.act, self.layer = backend, hidden, ffn, act, layer
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.routing = routing or Routing()
        self.routing.check(num_experts, top_k)
        # the always-on expert, a plain SwiGLU MLP of its own width: Qwen2-MoE's "shared_expert." behind a
        # sigmoid gate, DeepSeek's "shared_experts." (n_shared_experts of them fused into one) without one
        self.shared_expert = GatedMLP(backend, hidden, shared_ffn, act, layer) if shared_ffn else None
        self.shared_name, self.shared_gated, self.score_bias = shared_name, shared_gated, score_bias
        self.router = self.gate_up_proj = self.down_proj = self.shared_gate = None
        self.bias = None  # (E,) host float32 with score_bias: DeepSeek-V3's e_score_correction_bias

    def ops(self) -> set[str]:
        out = {"matmul", "softmax", "topk", "matmul_experts", "glu", "binary"}
        if self.shared_expert is not None:
            out |= self.shared_expert.ops()
            if self.shared_gated:
                out.add("act")  # tanh of the sigmoid gate
        return out

    def declare(self) -> Iterator[Weight]:
        e, d, f = self.num_experts, self.hidden, self.ffn
        yield weight("router", "gate.weight", (e, d))  # (E, D)
        yield weight("gate_up_proj", "experts.gate_up_proj", (e, 2 * f, d))  # (E, 2F, D) gate rows first
        yield weight("down_proj", "experts.down_proj", (e, d, f))  # (E, D, F)
        if self.shared_expert is not None and self.shared_gated:
            yield weight("shared_gate", "shared_expert_gate.weight", (1, d))  # (1, D)
        if self.score_bias:
            yield weight("bias", "gate.e_score_correction_bias", (e,))  # (E,)

    def children(self) -> dict[str, Module]:
        return {} if self.shared_expert is None else {self.shared_name: self.shared_expert}

    def load(self, get, upload, prefix: str = "") -> None:
        super().load(get, upload, prefix)
        if self.bias is not None:  # read by the host router
            self.bias = np.asarray(self.be.download(self.bias), dtype=np.float32)  # (E,)

    def __call__(self, x: Array) -> Array:
        be, k, f = self.be, self.top_k, self.ffn
        t, d = x.shape
        weights, ids = self._route(be.matmul(x, self.router))  # (T, k) each
        trace("ffn_moe_weights", self.layer, weights)
        gate_up = be.matmul_experts(x, self.gate_up_proj, ids).reshape(t * k, 2 * f)  # (T k, 2F)
        h = be.glu(gate_up[:, :f], gate_up[:, f:], self.act)  # (T k, F)
        # each (token, slot) row through its own expert: one expert per row
        out = be.matmul_experts(h, self.down_proj, ids.reshape(t * k, 1)).reshape(t, k, d)  # (T, k, D)
        y = weighted_sum(be, out, weights)  # (T, D)
        trace("ffn_moe_out", self.layer, y)
        if self.shared_expert is None:
            return y
        if not self.shared_gated:
            return be.binary("add", y, self.shared_expert(x))  # (T, D)
        gate = self._sigmoid(be.matmul(x, self.shared_gate))  # (T, 1)
        return be.binary("add", y, be.binary("mul", self.shared_expert(x), gate))  # (T, D)

    def _route(self, logits: Array) -> tuple[Array, Array]:
        """Router logits (T, E) -> (weights (T, k), expert ids (T, k)): on the backend for plain routing,
        on the host for DeepSeek's group-limited variants (blazr.models.layers.router)."""
        be, r = self.be, self.routing
        if r.on_host:
            host = np.asarray(be.download(logits), dtype=np.float32)  # (T, E)
            weights, ids = route_groups(host, r, self.top_k, self.norm_topk_prob, self.bias)
            return be.upload(weights, "f32"), be.upload(ids)
        weights, ids = be.topk(be.softmax(logits), self.top_k)  # (T, k) each, largest first
        if self.norm_topk_prob:
            weights = be.binary("div", weights, sum_columns(be, weights))  # (T, k)
        if r.scale != 1.0:
            weights = be.binary("mul", weights, r.scale)
        return weights, ids

    def _sigmoid(self, z: Array) -> Array:
        """sigmoid(z) = (1 + tanh(z / 2)) / 2: as accurate as tanh, and finite for any z (no exp to overflow)."""
        be = self.be
        return be.binary("mul", be.binary("add", be.act(be.binary("mul", z, 0.5), "tanh"), 1.0), 0.5)


def sum_columns(be, a: Array) -> Array:
    """a (T, k) -> (T, 1) row sums, from column slices (k is small; no reduction op needed)."""
    total = a[:, 0:1]
    for j in range(1, a.shape[1]):
        total = be.binary("add", total, a[:, j : j + 1])
    return total


def weighted_sum(be, out: Array, weights: Array) -> Array:
    """Each token's k expert outputs out (T, k, D) weighted by weights (T, k) and summed -> (T, D)."""
    t, k, _ = out.shape
    out = be.binary("mul", out, weights.reshape(t, k, 1))  # (T, k, D)
    y = out[:, 0]  # (T, D)
    for j in range(1, k):
        y = be.binary("add", y, out[:, j])
    return y


def check_routing(experts: int, top_k: int, count_key: str) -> None:
    """The router picks top_k of `experts`: 1 <= top_k <= experts, else ConfigError naming both keys."""
    if experts < 1 or not 1 <= top_k <= experts:
        raise ConfigError(f"num_experts_per_tok {top_k} must be between 1 and {count_key} ({experts})")


# ---- checkpoint layouts -> the declared (E, 2F, D) and (E, D, F) arrays ------------------------------------

_PER_EXPERT = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<e>\d+)\.(?P<part>\w+)\.weight$")
_PER_PART = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<part>gate_proj|up_proj|down_proj)\.weight$")
_FUSED = re.compile(r"^.+\.experts\.(gate_up_proj|down_proj)$")
GGUF_EXPERT_NAMES = {  # llama.cpp's merged 3-D tensors, one per projection: (E, F, D) gate/up, (E, D, F) down
    "blk.{N}.ffn_gate_inp": "model.layers.{N}.mlp.gate",
    "blk.{N}.ffn_gate_exps": "model.layers.{N}.mlp.experts.gate_proj",
    "blk.{N}.ffn_up_exps": "model.layers.{N}.mlp.experts.up_proj",
    "blk.{N}.ffn_down_exps": "model.layers.{N}.mlp.experts.down_proj",
}


def stack_experts(
    weights: dict[str, Any],
    num_experts: int,
    count_key: str,
    names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
) -> dict[str, Any]:
    """Per-expert 2-D tensors `<prefix>.experts.<e>.<gate|up|down>.weight` (`names`: the checkpoint's words,
    Mixtral's w1, w3, w2) or GGUF's 3-D `<prefix>.experts.<gate_proj|up_proj|down_proj>.weight` ->
    `<prefix>.experts.gate_up_proj` (E, 2F, D) and `<prefix>.experts.down_proj` (E, D, F); transformers 5's
    own fused pair passes through. An expert count other than the config's `count_key` is a CheckpointError
    naming the key and the tensor. Quantized experts (every projection in GGML blocks) become StackedExperts,
    read nowhere here: the weight uploader keeps them packed (widening them would cost 4-8x the memory)."""
    out: dict[str, Any] = {}
    # experts prefix -> "gate_proj" / "up_proj" / "down_proj" -> expert index (-1: a 3-D tensor) -> (name, tensor)
    groups: dict[str, dict[str, dict[int, tuple[str, Any]]]] = {}
    for name, tensor in weights.items():
        one, all_ = _PER_EXPERT.match(name), _PER_PART.match(name)
        if one and one["part"] in names:
            part = ("gate_proj", "up_proj", "down_proj")[names.index(one["part"])]
            groups.setdefault(one["prefix"], {}).setdefault(part, {})[int(one["e"])] = (name, tensor)
        elif all_ and len(tensor.shape) == 3:
            groups.setdefault(all_["prefix"], {}).setdefault(all_["part"], {})[-1] = (name, tensor)
        else:
            if _FUSED.match(name) or name.endswith(".mlp.gate.weight"):  # fused experts, or the router (E, D)
                check_count(name, tensor, tensor.shape[0], num_experts, count_key)
            out[name] = tensor
    for prefix, parts in groups.items():
        gate, up, down = (
            _found(prefix, p, parts, num_experts, count_key) for p in ("gate_proj", "up_proj", "down_proj")
        )
        for name, projections in ((".gate_up_proj", (gate, up)), (".down_proj", (down,))):
            stacked = StackedExperts(prefix + name, projections, num_experts)  # (E, 2F, D) or (E, D, F)
            # quantized: kept as the checkpoint's blocks, packed by the weight uploader where the backend can
            # multiply them; dense: one array now
            out[prefix + name] = stacked if stacked.quantized else stacked.load()
    return out


def _found(prefix: str, part: str, parts: dict, num_experts: int, count_key: str) -> tuple[Any, ...]:
    """One projection of every expert: (its 3-D tensor,) or its E 2-D tensors in expert order."""
    found = parts.get(part)
    if not found:
        raise CheckpointError(f"missing tensors {prefix}.<expert>.{part} ({count_key} = {num_experts})")
    if -1 in found:  # one 3-D tensor (GGUF)
        name, tensor = found[-1]
        check_count(name, tensor, tensor.shape[0], num_experts, count_key)
        return (tensor,)
    for e, (name, tensor) in sorted(found.items()):
        if e >= num_experts:
            where = getattr(tensor, "source", None) or "the checkpoint"
            raise CheckpointError(
                f"{where}: tensor {name!r} is expert {e} but config {count_key} = {num_experts}"
            )
    missing = [e for e in range(num_experts) if e not in found]
    if missing:
        raise CheckpointError(
            f"the checkpoint has no {part} tensor of expert {missing[0]} under {prefix!r}: config "
            f"{count_key} = {num_experts} but {len(found)} experts are stored"
        )
    return tuple(found[e][1] for e in range(num_experts))


def check_count(name: str, tensor, count: int, num_experts: int, count_key: str) -> None:
    if count != num_experts:
        where = getattr(tensor, "source", None) or "the checkpoint"
        raise CheckpointError(
            f"{where}: tensor {name!r} holds {count} experts but config {count_key} = {num_experts}"
        )
