"""Mamba2: two layers of Mamba2 mixers (no attention), 8 heads of 16 features in 2 groups of 16 states, a
conv kernel of 4 with bias, untied head. Step sizes dt from 0.05 to 0.5 (after softplus) and decay rates A from
-1 to -8, so the states both remember the prompt and move with every token; D around 1."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["Mamba2ForCausalLM"],
    model_type="mamba2",
    num_hidden_layers=2,
    num_heads=8,
    head_dim=16,
    expand=2,  # hidden 64 -> d_inner 128 = 8 heads * 16
    state_size=16,
    n_groups=2,
    conv_kernel=4,
    use_bias=False,
    use_conv_bias=True,
    layer_norm_epsilon=1e-5,
    residual_in_fp32=True,
    chunk_size=16,  # the prompt (8) and the full sequence (72) run transformers' chunked scan over chunks
    tie_word_embeddings=False,
    pad_token_id=0,
)
SEED = 11003


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, v = cfg["hidden_size"], cfg["vocab_size"]
    h, p, n, g, k = cfg["num_heads"], cfg["head_dim"], cfg["state_size"], cfg["n_groups"], cfg["conv_kernel"]
    inner = h * p
    conv_dim = inner + 2 * g * n
    w = {"backbone.embeddings.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        m = f"backbone.layers.{i}.mixer."
        w[f"backbone.layers.{i}.norm.weight"] = draw.norm(d)
        w[m + "in_proj.weight"] = draw.linear(inner + conv_dim + h, d, 2.0)
        w[m + "conv1d.weight"] = draw.normal(conv_dim, 1, k, std=0.5)
        w[m + "conv1d.bias"] = draw.normal(conv_dim, std=0.2)
        dt = np.exp(draw.rng.uniform(np.log(0.05), np.log(0.5), h))  # softplus(dt_bias) in [0.05, 0.5]
        w[m + "dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)  # softplus^-1
        w[m + "A_log"] = np.log(draw.rng.uniform(1.0, 8.0, h)).astype(np.float32)
        w[m + "D"] = draw.norm(h)
        w[m + "norm.weight"] = draw.norm(inner)
        w[m + "out_proj.weight"] = draw.linear(d, inner, 2.0)
    w["backbone.norm_f.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return {key: np.ascontiguousarray(a) for key, a in w.items()}
