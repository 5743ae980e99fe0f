"""Bamba: four layers, Mamba2 mixers on layers 0 and 2 and attention (partial RoPE over half of each 16-wide head,
GQA 4:2) on layers 1 and 3, each followed by a SwiGLU MLP; the Mamba layers have 8 heads of 16 features in one
group of 16 states. Step sizes and decay rates as in tests/tiny_zoo/mamba2.py."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["BambaForCausalLM"],
    model_type="bamba",
    num_hidden_layers=4,
    attn_layer_indices=[1, 3],
    attn_rotary_emb=8,  # llama.cpp's converter reads the rotary width here; transformers fixes it at half
    rope_theta=10000.0,
    mamba_n_heads=8,
    mamba_d_head=16,
    mamba_n_groups=1,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_chunk_size=16,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    pad_token_id=0,
)
SEED = 12007


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    h, p, n, g, k = (cfg[f"mamba_{x}"] for x in ("n_heads", "d_head", "d_state", "n_groups", "d_conv"))
    inner = h * p
    conv_dim = inner + 2 * g * n
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        w[pre + "input_layernorm.weight"] = draw.norm(d)
        if i in cfg["attn_layer_indices"]:
            w[pre + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
            w[pre + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
            w[pre + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
            w[pre + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        else:
            m = pre + "mamba."
            w[m + "in_proj.weight"] = draw.linear(inner + conv_dim + h, d, 2.0)
            w[m + "conv1d.weight"] = draw.normal(conv_dim, 1, k, std=0.5)
            w[m + "conv1d.bias"] = draw.normal(conv_dim, std=0.2)
            dt = np.exp(draw.rng.uniform(np.log(0.05), np.log(0.5), h))  # softplus(dt_bias) in [0.05, 0.5]
            w[m + "dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
            w[m + "A_log"] = np.log(draw.rng.uniform(1.0, 8.0, h)).astype(np.float32)
            w[m + "D"] = draw.norm(h)
            w[m + "norm.weight"] = draw.norm(inner)
            w[m + "out_proj.weight"] = draw.linear(d, inner, 2.0)
        w[pre + "pre_ff_layernorm.weight"] = draw.norm(d)
        w[pre + "feed_forward.gate_proj.weight"] = draw.linear(f, d)
        w[pre + "feed_forward.up_proj.weight"] = draw.linear(f, d)
        w[pre + "feed_forward.down_proj.weight"] = draw.linear(d, f, 2.0)
    w["model.final_layernorm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return {key: np.ascontiguousarray(a) for key, a in w.items()}
