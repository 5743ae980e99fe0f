"""Nemotron-H: six one-part layers "M-*M-*" (Mamba2, squared-ReLU MLP, attention without positions, Mamba2, MLP,
attention), the Mamba layers with 8 heads of 16 features in 2 groups of 16 states, GQA 4:2 attention, untied
head. Step sizes and decay rates as in tests/tiny_zoo/mamba2.py (above time_step_min, so its clamp is idle as
in a trained model's prompts)."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo.granitemoehybrid import mamba_weights

CONFIG = dict(
    architectures=["NemotronHForCausalLM"],
    model_type="nemotron_h",
    num_hidden_layers=6,
    hybrid_override_pattern="M-*M-*",
    mamba_num_heads=8,
    mamba_head_dim=16,
    n_groups=2,
    ssm_state_size=16,
    conv_kernel=4,
    expand=2,
    chunk_size=16,
    use_conv_bias=True,
    use_bias=False,
    mlp_hidden_act="relu2",
    mlp_bias=False,
    attention_bias=False,
    layer_norm_epsilon=1e-5,
    tie_word_embeddings=False,
    pad_token_id=0,
)
SEED = 17011


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    mamba_cfg = {
        "hidden_size": d,
        "mamba_n_heads": cfg["mamba_num_heads"],
        "mamba_d_head": cfg["mamba_head_dim"],
        "mamba_d_state": cfg["ssm_state_size"],
        "mamba_n_groups": cfg["n_groups"],
        "mamba_d_conv": cfg["conv_kernel"],
    }
    w = {"backbone.embeddings.weight": draw.normal(v, d, std=0.5)}
    for i, kind in enumerate(cfg["hybrid_override_pattern"]):
        m = f"backbone.layers.{i}.mixer."
        w[f"backbone.layers.{i}.norm.weight"] = draw.norm(d)
        if kind == "M":
            w |= mamba_weights(draw, m, mamba_cfg, 2.0)
        elif kind == "*":
            w[m + "q_proj.weight"] = draw.linear(hq, d, 2.0)
            w[m + "k_proj.weight"] = draw.linear(hkv, d, 2.0)
            w[m + "v_proj.weight"] = draw.linear(hkv, d)
            w[m + "o_proj.weight"] = draw.linear(d, hq, 2.0)
        else:  # relu^2 halves the mean square of a unit input's half that passes: a gain of 2 puts it back
            w[m + "up_proj.weight"] = draw.linear(f, d, 2.0)
            w[m + "down_proj.weight"] = draw.linear(d, f, 2.0)
    w["backbone.norm_f.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return {key: np.ascontiguousarray(a) for key, a in w.items()}


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers 5 names the released checkpoints' `backbone.` as `model.` (its from_pretrained renames)."""
    return cfg, {
        ("model." + k.removeprefix("backbone.") if k.startswith("backbone.") else k): a
        for k, a in weights.items()
    }
