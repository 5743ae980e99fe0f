"""How a mixture of experts picks each token's k experts and their weights: the router variants as options.

Plain routing (softmax over every expert, the k largest, optionally renormalised) runs on the backend inside
SparseMoE. DeepSeek's variants pick among groups of experts first, which needs per-group reductions the
backend has no op for; they run here on the host on the (T, E) router logits, as transformers computes them:

- "group_limited_greedy" (DeepSeek-V2): softmax scores; a group scores its best expert; only the experts of
  the topk_group best groups stay candidates.
- "noaux_tc" (DeepSeek-V3): sigmoid scores; the experts are chosen on the scores plus a learnt per-expert
  bias (e_score_correction_bias), a group scoring the sum of its two best; the weights are the unbiased
  scores of the chosen experts.

Either way the weights are renormalised with norm_topk_prob and multiplied by routed_scaling_factor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blazr.errors import ConfigError

METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


@dataclass(frozen=True)
class Routing:
    method: str = "greedy"
    groups: int = 1  # n_group: experts in groups of E / groups
    topk_groups: int = 1  # topk_group: groups whose experts stay candidates
    scale: float = 1.0  # routed_scaling_factor

    @property
    def on_host(self) -> bool:
        return self.method != "greedy"

    def check(self, experts: int, top_k: int) -> None:
        """A ConfigError naming the key whose value cannot route `top_k` of `experts`."""
        if self.method not in METHODS:
            raise ConfigError(
                f"topk_method {self.method!r} is not supported; use one of {', '.join(METHODS)}"
            )
        if self.method == "greedy":
            return
        if self.groups < 1 or experts % self.groups:
            raise ConfigError(f"n_group {self.groups} does not divide the {experts} experts")
        if not 1 <= self.topk_groups <= self.groups:
            raise ConfigError(f"topk_group {self.topk_groups} must be between 1 and n_group ({self.groups})")
        if top_k > self.topk_groups * (experts // self.groups):
            raise ConfigError(
                f"num_experts_per_tok {top_k} is more than the {self.topk_groups} groups of topk_group hold"
            )


def route_groups(
    logits: np.ndarray, routing: Routing, top_k: int, norm_topk_prob: bool, bias: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """logits (T, E) float32 -> (weights (T, k) float32, expert ids (T, k) int32) by routing's method."""
    logits = logits.astype(np.float32, copy=False)
    t, e = logits.shape
    if routing.method == "noaux_tc":
        scores = 1.0 / (1.0 + np.exp(-logits))  # (T, E)
        choice = scores + (0.0 if bias is None else bias)  # (T, E) biased, for choosing only
        by_group = np.sort(choice.reshape(t, routing.groups, -1), axis=-1)  # (T, G, E / G)
        group_scores = by_group[..., -2:].sum(axis=-1)  # (T, G) sum of the two best
    else:
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = shifted / shifted.sum(axis=-1, keepdims=True)  # (T, E) softmax
        choice = scores
        group_scores = choice.reshape(t, routing.groups, -1).max(axis=-1)  # (T, G) best expert of each
    best_groups = np.argsort(-group_scores, axis=-1, kind="stable")[
        :, : routing.topk_groups
    ]  # (T, topk_group)
    keep = np.zeros((t, routing.groups), dtype=bool)
    np.put_along_axis(keep, best_groups, True, axis=-1)
    # the experts of other groups: 0 as transformers' V2 masks them (below any softmax score), -inf as V3's
    # (biased sigmoid scores may be negative)
    masked = -np.inf if routing.method == "noaux_tc" else 0.0
    choice = np.where(np.repeat(keep, e // routing.groups, axis=-1), choice, masked)  # (T, E)
    ids = np.argsort(-choice, axis=-1, kind="stable")[:, :top_k].astype(np.int32)  # (T, k)
    weights = np.take_along_axis(scores, ids, axis=-1)  # (T, k)
    if norm_topk_prob:
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
    return (weights * routing.scale).astype(np.float32), ids
