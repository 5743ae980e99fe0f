"""Falcon-H1: four layers, each running attention (8 heads of 16 features, wider than hidden_size / heads, GQA
8:2, RoPE) and a Mamba2 mixer (8 heads of 16 features, 16 states in one group; mamba_d_ssm 128 where
mamba_expand * hidden_size is 64) side by side on the same normed input, then a SwiGLU MLP. The gated norm sits
after the gate, as in the released configs (mamba_rms_norm true, mamba_norm_before_gate false). Every
multiplier is away from 1 and a power of two, so each shows and folding it into F16 / BF16 weights is exact
(llama.cpp's converter folds them before rounding); the drawn weights undo their scale."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["FalconH1ForCausalLM"],
    model_type="falcon_h1",
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=16,
    rope_theta=10000.0,
    mamba_d_ssm=128,
    mamba_n_heads=8,
    mamba_d_head=16,
    mamba_n_groups=1,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=1,
    mamba_chunk_size=16,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
    projectors_bias=False,
    mamba_rms_norm=True,
    mamba_norm_before_gate=False,
    embedding_multiplier=4.0,
    lm_head_multiplier=0.5,
    mlp_multipliers=[0.5, 2.0],  # gate, down
    key_multiplier=2.0,
    attention_in_multiplier=0.5,
    attention_out_multiplier=0.5,
    ssm_multipliers=[0.5, 2.0, 0.5, 2.0, 0.5],  # z, x, B, C, dt
    ssm_in_multiplier=0.5,
    ssm_out_multiplier=2.0,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    pad_token_id=0,
)
SEED = 14011


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    h, n, g, k = (cfg[f"mamba_{x}"] for x in ("n_heads", "d_state", "n_groups", "d_conv"))
    inner = cfg["mamba_d_ssm"]
    conv_dim = inner + 2 * g * n
    ain, aout, km = (
        cfg[x] for x in ("attention_in_multiplier", "attention_out_multiplier", "key_multiplier")
    )
    gate, down = cfg["mlp_multipliers"]
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5 / cfg["embedding_multiplier"])}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        w[pre + "input_layernorm.weight"] = draw.norm(d)
        w[pre + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0 / ain)
        w[pre + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0 / (ain * km))
        w[pre + "self_attn.v_proj.weight"] = draw.linear(hkv, d, 1.0 / ain)
        w[pre + "self_attn.o_proj.weight"] = draw.linear(d, hq, 1.0 / aout)
        m = pre + "mamba."
        w[m + "in_proj.weight"] = draw.linear(inner + conv_dim + h, d, 2.0 / cfg["ssm_in_multiplier"])
        w[m + "conv1d.weight"] = draw.normal(conv_dim, 1, k, std=0.5)
        w[m + "conv1d.bias"] = draw.normal(conv_dim, std=0.2)
        dt = np.exp(draw.rng.uniform(np.log(0.05), np.log(0.5), h))  # softplus(dt_bias) in [0.05, 0.5]
        w[m + "dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
        w[m + "A_log"] = np.log(draw.rng.uniform(1.0, 8.0, h)).astype(np.float32)
        w[m + "D"] = draw.norm(h)
        w[m + "norm.weight"] = draw.norm(inner)
        w[m + "out_proj.weight"] = draw.linear(d, inner, 1.0 / cfg["ssm_out_multiplier"])
        w[pre + "pre_ff_layernorm.weight"] = draw.norm(d)
        w[pre + "feed_forward.gate_proj.weight"] = draw.linear(f, d, 1.0 / gate)
        w[pre + "feed_forward.up_proj.weight"] = draw.linear(f, d)
        w[pre + "feed_forward.down_proj.weight"] = draw.linear(d, f, 2.0 / down)
    w["model.final_layernorm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0 / cfg["lm_head_multiplier"])
    return {key: np.ascontiguousarray(a) for key, a in w.items()}
