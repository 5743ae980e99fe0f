"""Jamba: four layers, Mamba (1) mixers on layers 0, 1 and 3 (d_inner 128, 16 states, dt rank 8, dt/B/C
RMSNorms with weights) and attention without positions on layer 2 (attn_layer_period 4, offset 2); layers 1 and 3
have a top-2-of-4 mixture whose router weights are not renormalised (expert_layer_period 2, offset 1), the
others a SwiGLU MLP. Checkpoint names as released (feed_forward.router, feed_forward.experts.E.*)."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["JambaForCausalLM"],
    model_type="jamba",
    num_hidden_layers=4,
    attn_layer_period=4,
    attn_layer_offset=2,
    expert_layer_period=2,
    expert_layer_offset=1,
    num_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_dt_rank=8,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
    tie_word_embeddings=False,
    pad_token_id=0,
)
SEED = 18013
NAMES = ("gate_proj", "up_proj", "down_proj")


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    n, k, r, inner = cfg["mamba_d_state"], cfg["mamba_d_conv"], cfg["mamba_dt_rank"], cfg["mamba_expand"] * d
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]:
            w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
            w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
            w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
            w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        else:
            m = p + "mamba."
            w[m + "in_proj.weight"] = draw.linear(2 * inner, d, 2.0)
            w[m + "conv1d.weight"] = draw.normal(inner, 1, k, std=0.5)
            w[m + "conv1d.bias"] = draw.normal(inner, std=0.2)
            w[m + "x_proj.weight"] = draw.linear(r + 2 * n, inner, 2.0)
            w[m + "dt_layernorm.weight"] = draw.norm(r)
            w[m + "b_layernorm.weight"] = draw.norm(n)
            w[m + "c_layernorm.weight"] = draw.norm(n)
            w[m + "dt_proj.weight"] = draw.linear(inner, r, 0.5)
            dt = np.exp(draw.rng.uniform(np.log(0.05), np.log(0.5), inner))  # softplus(bias) in [0.05, 0.5]
            w[m + "dt_proj.bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
            rates = np.arange(1, n + 1, dtype=np.float64)[None, :] * draw.rng.uniform(0.5, 1.5, (inner, 1))
            w[m + "A_log"] = np.log(rates).astype(np.float32)  # (I, N)
            w[m + "D"] = draw.norm(inner)
            w[m + "out_proj.weight"] = draw.linear(d, inner, 2.0)
        w[p + "pre_ff_layernorm.weight"] = draw.norm(d)
        q = p + "feed_forward."
        if i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]:
            e = _moe.experts(draw, q, d, f, NAMES)
            e[q + "router.weight"] = e.pop(q + "gate.weight")  # (E, D)
            w |= e
        else:
            w[q + "gate_proj.weight"] = draw.linear(f, d)
            w[q + "up_proj.weight"] = draw.linear(f, d)
            w[q + "down_proj.weight"] = draw.linear(d, f, 2.0)
    w["model.final_layernorm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return {key: np.ascontiguousarray(a) for key, a in w.items()}


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers 5 fuses each mixture's experts into gate_up_proj / down_proj when it loads a checkpoint."""
    return cfg, _moe.fuse_experts(weights, NAMES)
