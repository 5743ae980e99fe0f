"""Mamba (1): two layers of selective-scan mixers, d_inner 128 with 16 states per channel (decay rates from
-1 to -16, S4D's initialisation, spread per channel), a step-size rank of 8, conv kernel 4 with bias, tied
embeddings (Mamba's default). Step sizes from 0.05 to 0.5 after softplus."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["MambaForCausalLM"],
    model_type="mamba",
    num_hidden_layers=2,
    state_size=16,
    expand=2,
    conv_kernel=4,
    time_step_rank=8,
    use_bias=False,
    use_conv_bias=True,
    layer_norm_epsilon=1e-5,
    residual_in_fp32=True,
    tie_word_embeddings=True,
    pad_token_id=0,
)
SEED = 15013


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, v, n, k, r = (
        cfg["hidden_size"],
        cfg["vocab_size"],
        cfg["state_size"],
        cfg["conv_kernel"],
        cfg["time_step_rank"],
    )
    inner = cfg["expand"] * d
    w = {"backbone.embeddings.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        m = f"backbone.layers.{i}.mixer."
        w[f"backbone.layers.{i}.norm.weight"] = draw.norm(d)
        w[m + "in_proj.weight"] = draw.linear(2 * inner, d, 2.0)
        w[m + "conv1d.weight"] = draw.normal(inner, 1, k, std=0.5)
        w[m + "conv1d.bias"] = draw.normal(inner, std=0.2)
        w[m + "x_proj.weight"] = draw.linear(r + 2 * n, inner, 2.0)
        w[m + "dt_proj.weight"] = draw.linear(inner, r, 0.5)
        dt = np.exp(draw.rng.uniform(np.log(0.05), np.log(0.5), inner))  # softplus(bias) in [0.05, 0.5]
        w[m + "dt_proj.bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
        rates = np.arange(1, n + 1, dtype=np.float64)[None, :] * draw.rng.uniform(0.5, 1.5, (inner, 1))
        w[m + "A_log"] = np.log(rates).astype(np.float32)  # (I, N)
        w[m + "D"] = draw.norm(inner)
        w[m + "out_proj.weight"] = draw.linear(d, inner, 2.0)
    w["backbone.norm_f.weight"] = draw.norm(d)
    return {key: np.ascontiguousarray(a) for key, a in w.items()}
