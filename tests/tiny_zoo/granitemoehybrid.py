"""Granite-4.0-H: Granite's multipliers (each away from 1) on a hybrid of Mamba2 mixers (layers 0 and 2: 8 heads
of 16 features, 16 states) and attention without positions (NoPE, layers 1 and 3), each followed by a top-2-of-4
mixture of SwiGLU experts plus an always-on shared MLP (its gate and up rows stored as one input_linear), all
scaled by the residual multiplier."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["GraniteMoeHybridForCausalLM"],
    model_type="granitemoehybrid",
    num_hidden_layers=4,
    layer_types=["mamba", "attention", "mamba", "attention"],
    position_embedding_type="nope",
    intermediate_size=32,  # each expert's width
    shared_intermediate_size=64,
    num_local_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    mamba_n_heads=8,
    mamba_d_head=16,
    mamba_n_groups=1,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_chunk_size=16,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
    # as tests/tiny_zoo/granitemoe.py: activations at the other tiny models' scale, each multiplier visible
    embedding_multiplier=4.0,
    residual_multiplier=0.5,
    attention_multiplier=0.5,
    logits_scaling=0.5,
    tie_word_embeddings=False,
    attention_bias=False,
    pad_token_id=0,
)
SEED = 13009
NAMES = ("gate_proj", "up_proj", "down_proj")


def mamba_weights(draw, m: str, cfg: dict, gain: float) -> dict[str, np.ndarray]:
    """One Mamba2 mixer under prefix m (sizes from the mamba_* keys); out_proj's rows of norm ~gain."""
    d = cfg["hidden_size"]
    h, p, n, g, k = (cfg[f"mamba_{x}"] for x in ("n_heads", "d_head", "d_state", "n_groups", "d_conv"))
    inner, conv_dim = h * p, h * p + 2 * g * n
    dt = np.exp(draw.rng.uniform(np.log(0.05), np.log(0.5), h))  # softplus(dt_bias) in [0.05, 0.5]
    return {
        m + "in_proj.weight": draw.linear(inner + conv_dim + h, d, 2.0),
        m + "conv1d.weight": draw.normal(conv_dim, 1, k, std=0.5),
        m + "conv1d.bias": draw.normal(conv_dim, std=0.2),
        m + "dt_bias": (dt + np.log(-np.expm1(-dt))).astype(np.float32),
        m + "A_log": np.log(draw.rng.uniform(1.0, 8.0, h)).astype(np.float32),
        m + "D": draw.norm(h),
        m + "norm.weight": draw.norm(inner),
        m + "out_proj.weight": draw.linear(d, inner, gain),
    }


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    fs, hq, hkv = (
        cfg["shared_intermediate_size"],
        cfg["num_attention_heads"] * dh,
        cfg["num_key_value_heads"] * dh,
    )
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5 / 4.0)}  # x4 by the embedding multiplier
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        if cfg["layer_types"][i] == "attention":
            w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
            w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
            w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
            w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 4.0)  # x2 against the residual 0.5
        else:
            w |= mamba_weights(draw, p + "mamba.", cfg, 4.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        if cfg["num_local_experts"]:
            e = _moe.experts(draw, "", d, f, NAMES)
            stack = {
                n: np.stack([e[f"experts.{x}.{n}.weight"] for x in range(_moe.NUM_EXPERTS)]) for n in NAMES
            }
            q = p + "block_sparse_moe."
            w[q + "router.layer.weight"] = e["gate.weight"]  # (E, D)
            w[q + "input_linear.weight"] = np.concatenate([stack["gate_proj"], stack["up_proj"]], axis=1)
            w[q + "output_linear.weight"] = 2.0 * stack["down_proj"]  # (E, D, F)
        w[p + "shared_mlp.input_linear.weight"] = np.concatenate([draw.linear(fs, d), draw.linear(fs, d)])
        w[p + "shared_mlp.output_linear.weight"] = draw.linear(d, fs, 2.0)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 2.0)  # the logit divisor 0.5 doubles it
    return {key: np.ascontiguousarray(a) for key, a in w.items()}


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers 5's names (router.weight, experts.gate_up_proj / down_proj) and its "linear_attention" /
    "full_attention" words for the layer types."""
    renames = {
        "router.layer.weight": "router.weight",
        "input_linear.weight": "experts.gate_up_proj",
        "output_linear.weight": "experts.down_proj",
    }
    out = {}
    for name, tensor in weights.items():
        for old, new in renames.items():
            if ".block_sparse_moe." in name and name.endswith(old):
                name = name.removesuffix(old) + new
        out[name] = tensor
    words = {"mamba": "linear_attention", "attention": "full_attention"}
    return cfg | {"layer_types": [words[t] for t in cfg["layer_types"]]}, out
