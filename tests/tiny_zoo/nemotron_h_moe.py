"""Nemotron-H with Nemotron 3's mixture layers: four one-part layers "ME*E" (Mamba2, mixture, attention without
positions, mixture), the Mamba and attention layers as in tests/tiny_zoo/nemotron_h.py. Each mixture routes
top-2 of 8 ungated relu2 experts in a latent space of 32 (fc1_latent_proj / fc2_latent_proj around them) by
DeepSeek-V3's router (sigmoid scores plus a selection bias, the best of 2 groups, renormalised, times 2.5),
beside a relu2 shared expert on the hidden state itself. Checkpoint names as released (backbone.,
mixer.experts.<e>.up_proj / down_proj)."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe
from tests.tiny_zoo import nemotron_h as dense

NUM_EXPERTS = 8
CONFIG = dense.CONFIG | dict(
    num_hidden_layers=4,
    hybrid_override_pattern="ME*E",
    n_routed_experts=NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    moe_intermediate_size=64,  # a multiple of 32: the experts requantize to Q8_0 (tests/test_family_mamba.py)
    moe_shared_expert_intermediate_size=48,
    n_shared_experts=1,
    moe_latent_size=32,
    n_group=2,
    topk_group=1,
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
)
SEED = 17037


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    """The dense model's layers for "M" and "*"; a mixture for each "E"."""
    pattern = cfg["hybrid_override_pattern"]
    w = dense.weights(cfg | {"hybrid_override_pattern": pattern.replace("E", "-")}, draw)
    d, fe, fs, lat = (
        cfg["hidden_size"],
        cfg["moe_intermediate_size"],
        cfg["moe_shared_expert_intermediate_size"],
        cfg["moe_latent_size"],
    )
    for i, kind in enumerate(pattern):
        if kind != "E":
            continue
        m = f"backbone.layers.{i}.mixer."
        del w[m + "up_proj.weight"], w[m + "down_proj.weight"]
        w[m + "gate.weight"] = draw.linear(NUM_EXPERTS, d, _moe.ROUTER_GAIN)
        # a selection bias of a few tenths: large enough to change which experts win over the raw scores
        w[m + "gate.e_score_correction_bias"] = draw.normal(NUM_EXPERTS, std=0.3)
        w[m + "fc1_latent_proj.weight"] = draw.linear(lat, d, 2.0)
        for e in range(NUM_EXPERTS):
            w[m + f"experts.{e}.up_proj.weight"] = draw.linear(fe, lat, 2.0)
            w[m + f"experts.{e}.down_proj.weight"] = draw.linear(lat, fe, 2.0)
        w[m + "fc2_latent_proj.weight"] = draw.linear(d, lat)
        w[m + "shared_experts.up_proj.weight"] = draw.linear(fs, d, 2.0)
        w[m + "shared_experts.down_proj.weight"] = draw.linear(d, fs, 2.0)
    return {key: np.ascontiguousarray(a) for key, a in w.items()}


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers 5 renames backbone. to model. and stacks each mixture's experts into experts.up_proj
    (E, F, L) and experts.down_proj (E, L, F) (its conversion mapping for nemotron_h)."""
    cfg, renamed = dense.as_transformers(cfg, weights)
    out: dict[str, np.ndarray] = {}
    stacks: dict[str, dict[int, np.ndarray]] = {}
    for name, a in renamed.items():
        head, sep, tail = name.partition(".experts.")
        if not sep:
            out[name] = a
            continue
        e, part, _ = tail.split(".")
        stacks.setdefault(f"{head}.experts.{part}", {})[int(e)] = a
    for name, by_expert in stacks.items():
        out[name] = np.ascontiguousarray(np.stack([by_expert[e] for e in range(len(by_expert))]))
    return cfg, out
