"""Phi-2: parallel blocks with one shared LayerNorm (with bias), attention with q/k/v and `dense` biases
rotating the first 0.4 of each head (6 of 16 features), an fc1 -> gelu_new -> fc2 MLP with biases, a final
LayerNorm and an LM head with a bias.

Shaped as llama.cpp's phi2 converter assumes: no GQA (it writes head_count_kv = head_count) and an MLP four times
the width (it writes feed_forward_length = 4 x embedding).
"""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["PhiForCausalLM"],
    model_type="phi",
    hidden_act="gelu_new",
    num_key_value_heads=4,
    intermediate_size=256,
    partial_rotary_factor=0.4,
    layer_norm_eps=1e-5,
    rope_theta=10000.0,
    qk_layernorm=False,
    tie_word_embeddings=False,
)
SEED = 9002


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        # LayerNorm biases away from 0, so a dropped one shows in the logits
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "input_layernorm.bias"] = draw.normal(d, std=0.1)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.q_proj.bias"] = draw.normal(hq, std=0.3)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.k_proj.bias"] = draw.normal(hkv, std=0.3)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.v_proj.bias"] = draw.normal(hkv, std=0.3)
        w[p + "self_attn.dense.weight"] = draw.linear(d, hq, 2.0)
        w[p + "self_attn.dense.bias"] = draw.normal(d, std=0.1)
        w[p + "mlp.fc1.weight"] = draw.linear(f, d)
        w[p + "mlp.fc1.bias"] = draw.normal(f, std=0.3)
        w[p + "mlp.fc2.weight"] = draw.linear(d, f, 2.0)
        w[p + "mlp.fc2.bias"] = draw.normal(d, std=0.1)
    w["model.final_layernorm.weight"] = draw.norm(d)
    w["model.final_layernorm.bias"] = draw.normal(d, std=0.1)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    w["lm_head.bias"] = draw.normal(v, std=0.3)
    return w
