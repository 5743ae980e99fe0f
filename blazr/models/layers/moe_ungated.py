"""Nemotron 3's mixture of experts (HF NemotronHMoE): ungated squared-ReLU experts down(relu2(up(x))), on an
optional latent projection of the input, beside an always-on shared expert that sees the input itself.

    y = fc2_latent(sum_k w_k down_k(relu2(up_k(fc1_latent(x))))) + shared(x)

The router is DeepSeek-V3's ("noaux_tc", blazr.models.layers.router): sigmoid scores, experts chosen on the
scores plus e_score_correction_bias within the best topk_group of n_group groups, the unbiased scores of the
chosen experts renormalised with norm_topk_prob and multiplied by routed_scaling_factor.

The experts are two 3-D arrays, (E, F, L) up and (E, L, F) down (L: moe_latent_size, else the hidden size), as
transformers 5 holds them (`experts.up_proj`, `experts.down_proj`). The released checkpoints keep one 2-D tensor
per expert (`experts.<e>.up_proj.weight`), GGUF files one 3-D tensor per projection; `stack_ungated_experts`
turns either into the declared pair, quantized experts staying in their blocks as SparseMoE's do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from blazr.models.base import Array, trace
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.moe import _found, check_count, weighted_sum
from blazr.models.layers.router import Routing, route_groups
from blazr.models.layers.stacked_experts import StackedExperts


class UngatedMoE(Module):
    """sum over the k experts the router picks of weight * down(relu2(up(x))), in a latent space when
    `latent`, plus a relu2 shared expert of width `shared_ffn` on x."""

    OPS = ("matmul", "matmul_experts", "act", "binary")

    def __init__(
        self,
        backend,
        hidden: int,
        ffn: int,
        num_experts: int,
        top_k: int,
        layer: int,
        norm_topk_prob: bool,
        routing: Routing,
        shared_ffn: int = 0,
        latent: int | None = None,
        bias: bool = False,
    ):
        self.be, self.hidden, self.ffn, self.layer = backend, hidden, ffn, layer
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.routing, self.latent, self.bias = routing, latent, bias
        routing.check(num_experts, top_k)
        self.shared_experts = MLP(backend, hidden, shared_ffn, "relu2", layer, bias) if shared_ffn else None
        self.router = self.up_proj = self.down_proj = self.score_bias = None
        self.fc1_latent_proj = self.fc2_latent_proj = self.fc1_bias = self.fc2_bias = None

    def declare(self) -> Iterator[Weight]:
        e, d, f = self.num_experts, self.hidden, self.ffn
        inner = self.latent or d
        yield weight("router", "gate.weight", (e, d))  # (E, D)
        yield weight("score_bias", "gate.e_score_correction_bias", (e,))  # (E,)
        yield weight("up_proj", "experts.up_proj", (e, f, inner))  # (E, F, L)
        yield weight("down_proj", "experts.down_proj", (e, inner, f))  # (E, L, F)
        if self.latent:
            yield weight("fc1_latent_proj", "fc1_latent_proj.weight", (inner, d))  # (L, D)
            yield weight("fc2_latent_proj", "fc2_latent_proj.weight", (d, inner))  # (D, L)
            if self.bias:
                yield weight("fc1_bias", "fc1_latent_proj.bias", (inner,))
                yield weight("fc2_bias", "fc2_latent_proj.bias", (d,))

    def children(self) -> dict[str, Module]:
        return {} if self.shared_experts is None else {"shared_experts.": self.shared_experts}

    def load(self, get, upload, prefix: str = "") -> None:
        super().load(get, upload, prefix)
        self.score_bias = np.asarray(self.be.download(self.score_bias), dtype=np.float32)  # (E,) host router

    def __call__(self, x: Array) -> Array:
        be, k, f = self.be, self.top_k, self.ffn
        t, d = x.shape
        logits = np.asarray(be.download(be.matmul(x, self.router)), dtype=np.float32)  # (T, E)
        weights, ids = route_groups(logits, self.routing, k, self.norm_topk_prob, self.score_bias)
        weights, ids = be.upload(weights, "f32"), be.upload(ids)  # (T, k) each
        trace("ffn_moe_weights", self.layer, weights)
        h = x
        if self.latent:
            h = self._project(h, "fc1_latent_proj", self.fc1_bias)  # (T, L)
        inner = h.shape[1]
        h = be.matmul_experts(h, self.up_proj, ids).reshape(t * k, f)  # (T k, F)
        h = be.act(h, "relu")
        h = be.binary("mul", h, h)  # relu(x)^2
        # each (token, slot) row through its own expert: one expert per row
        out = be.matmul_experts(h, self.down_proj, ids.reshape(t * k, 1)).reshape(t, k, inner)  # (T, k, L)
        y = weighted_sum(be, out, weights)  # (T, L)
        if self.latent:
            y = self._project(y, "fc2_latent_proj", self.fc2_bias)  # (T, D)
        trace("ffn_moe_out", self.layer, y)
        if self.shared_experts is None:
            return y
        return be.binary("add", y, self.shared_experts(x))  # (T, D)

    def _project(self, x: Array, attr: str, bias: Array | None) -> Array:
        out = self.linear(x, attr)
        return out if bias is None else self.be.binary("add", out, bias)


# ---- checkpoint layouts -> the declared (E, F, L) and (E, L, F) arrays --------------------------------------

_PER_EXPERT = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<e>\d+)\.(?P<part>up_proj|down_proj)\.weight$")
_PER_PART = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<part>up_proj|down_proj)\.weight$")
_FUSED = re.compile(r"^.+\.experts\.(up_proj|down_proj)$")


def stack_ungated_experts(weights: dict[str, Any], num_experts: int, count_key: str) -> dict[str, Any]:
    """Per-expert 2-D `<prefix>.experts.<e>.<up_proj|down_proj>.weight` or GGUF's 3-D
    `<prefix>.experts.<up_proj|down_proj>.weight` -> `<prefix>.experts.up_proj` (E, F, L) and
    `<prefix>.experts.down_proj` (E, L, F); transformers 5's fused pair passes through. Quantized experts become
    StackedExperts, kept packed by the weight uploader."""
    out: dict[str, Any] = {}
    groups: dict[str, dict[str, dict[int, tuple[str, Any]]]] = {}
    for name, tensor in weights.items():
        one, all_ = _PER_EXPERT.match(name), _PER_PART.match(name)
        if one:
            groups.setdefault(one["prefix"], {}).setdefault(one["part"], {})[int(one["e"])] = (name, tensor)
        elif all_ and len(tensor.shape) == 3:
            groups.setdefault(all_["prefix"], {}).setdefault(all_["part"], {})[-1] = (name, tensor)
        else:
            # fused experts, or the router (E, D): an expert count other than the config's names the tensor
            if _FUSED.match(name) or name.endswith(".mixer.gate.weight"):
                check_count(name, tensor, tensor.shape[0], num_experts, count_key)
            out[name] = tensor
    for prefix, parts in groups.items():
        for part in ("up_proj", "down_proj"):
            stacked = StackedExperts(
                f"{prefix}.{part}", (_found(prefix, part, parts, num_experts, count_key),), num_experts
            )
            out[f"{prefix}.{part}"] = stacked if stacked.quantized else stacked.load()
    return out
