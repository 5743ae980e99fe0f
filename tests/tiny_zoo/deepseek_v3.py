"""DeepSeek-V3: DeepSeek-V2's latent attention (here without the low-rank query: one q_proj, and plain RoPE)
with V3's router: sigmoid scores, experts chosen on the scores plus a learnt per-expert bias
(e_score_correction_bias) within the best of 2 groups (a group scoring the sum of its two best), the chosen
experts' unbiased scores renormalised and multiplied by routed_scaling_factor; one shared expert."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe, deepseek_v2

CONFIG = dict(
    architectures=["DeepseekV3ForCausalLM"],
    model_type="deepseek_v3",
    num_hidden_layers=3,
    num_key_value_heads=4,
    head_dim=8,  # = qk_rope_head_dim: transformers' V3 sizes its rotary table from head_dim when given
    q_lora_rank=None,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=12,
    rope_theta=10000.0,
    rope_interleave=True,
    first_k_dense_replace=1,
    n_routed_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    n_shared_experts=1,
    moe_intermediate_size=32,
    n_group=2,
    topk_group=1,
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
    # as the released config.json says (transformers' class has no such keys; llama.cpp's converter reads them)
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    tie_word_embeddings=False,
    attention_bias=False,
    num_mtp_layers=0,
)
SEED = 9003
NAMES = deepseek_v2.NAMES


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
    kvr = cfg["kv_lora_rank"]
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(h * (nope + rope), d, 2.0)
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
        # a selection bias of a few tenths: large enough to change which experts win over the raw scores
        w[p + "mlp.gate.e_score_correction_bias"] = draw.normal(cfg["n_routed_experts"], std=0.3)
        fs = fe * cfg["n_shared_experts"]
        w[p + "mlp.shared_experts.gate_proj.weight"] = draw.linear(fs, d)
        w[p + "mlp.shared_experts.up_proj.weight"] = draw.linear(fs, d)
        w[p + "mlp.shared_experts.down_proj.weight"] = draw.linear(d, fs, 2.0)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    return cfg, _moe.fuse_experts(weights, NAMES)
