"""DeepSeek-V2: multi-head latent attention (queries through a low-rank q_a/q_b pair, keys and values from a
kv_lora_rank latent plus one shared rotary key of qk_rope_head_dim, interleaved RoPE) with DeepSeek's YaRN
(mscale and mscale_all_dim, as the released configs), a dense first layer (first_k_dense_replace), then a
mixture of 4 routed experts (2 per token, group-limited: 2 groups, the best 1 group's experts only, weights
times routed_scaling_factor, not renormalised) plus one always-on shared expert."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["DeepseekV2ForCausalLM"],
    model_type="deepseek_v2",
    num_hidden_layers=3,
    num_key_value_heads=4,
    head_dim=None,
    q_lora_rank=24,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=12,
    rope_theta=10000.0,
    rope_scaling=dict(
        type="yarn",
        rope_type="yarn",
        factor=4.0,
        original_max_position_embeddings=128,
        beta_fast=32,
        beta_slow=1,
        mscale=0.707,
        mscale_all_dim=0.707,
    ),
    first_k_dense_replace=1,
    n_routed_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    n_shared_experts=1,
    moe_intermediate_size=32,
    n_group=2,
    topk_group=1,
    topk_method="group_limited_greedy",
    routed_scaling_factor=1.5,
    norm_topk_prob=False,
    tie_word_embeddings=False,
    attention_bias=False,
)
SEED = 8011
NAMES = ("gate_proj", "up_proj", "down_proj")


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, fe, v = (
        cfg["hidden_size"],
        cfg["intermediate_size"],
        cfg["moe_intermediate_size"],
        cfg["vocab_size"],
    )
    h, nope, rope, vd = (
        cfg["num_attention_heads"],
        cfg["qk_nope_head_dim"],
        cfg["qk_rope_head_dim"],
        cfg["v_head_dim"],
    )
    qr, kvr = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_a_proj.weight"] = draw.linear(qr, d)
        w[p + "self_attn.q_a_layernorm.weight"] = draw.norm(qr)
        w[p + "self_attn.q_b_proj.weight"] = draw.linear(h * (nope + rope), qr, 2.0)
        w[p + "self_attn.kv_a_proj_with_mqa.weight"] = draw.linear(kvr + rope, d, 2.0)
        w[p + "self_attn.kv_a_layernorm.weight"] = draw.norm(kvr)
        w[p + "self_attn.kv_b_proj.weight"] = draw.linear(h * (nope + vd), kvr)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, h * vd, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        if i < cfg["first_k_dense_replace"]:
            w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
            w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
            w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
            continue
        w |= _moe.experts(draw, p + "mlp.", d, fe, NAMES)
        fs = fe * cfg["n_shared_experts"]
        w[p + "mlp.shared_experts.gate_proj.weight"] = draw.linear(fs, d)
        w[p + "mlp.shared_experts.up_proj.weight"] = draw.linear(fs, d)
        w[p + "mlp.shared_experts.down_proj.weight"] = draw.linear(d, fs, 2.0)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    return cfg, _moe.fuse_experts(weights, NAMES)
