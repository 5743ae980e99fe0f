"""Granite: Llama with embedding, residual, attention and logit multipliers, each away from 1 so it shows."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["GraniteForCausalLM"],
    model_type="granite",
    # head_dim stays 16 = hidden / heads: llama.cpp's converter drops head_dim for Granite
    rope_theta=10000.0,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    # Real Granite 3 values are 12, 0.22, 0.0078125 and 8; these keep the tiny model's activations at the
    # scale the other tiny models use while each still changes the logits
    embedding_multiplier=4.0,
    residual_multiplier=0.5,
    attention_multiplier=0.5,  # vs 1/sqrt(16) = 0.25
    logits_scaling=0.5,
)
SEED = 7003


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    dh = cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    # the embedding multiplier 4 is undone by a 4x smaller table, so the residual stream starts at std 0.5
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5 / 4.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 4.0)  # x2 against the residual multiplier 0.5
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 4.0)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 2.0)  # the logit divisor 0.5 doubles it to the others' gain 4
    return w
