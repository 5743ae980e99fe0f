"""Qwen3-MoE: Qwen3 attention (no biases, per-head q/k RMSNorms, head_dim 32 wider than hidden / heads) and
pre-norm blocks, a top-2-of-4 mixture of SwiGLU experts renormalised over the two (norm_topk_prob, as in the
released models), no shared expert."""

from __future__ import annotations

import numpy as np

from tests.tiny_models import QK_NORM_GAIN
from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["Qwen3MoeForCausalLM"],
    model_type="qwen3_moe",
    rope_theta=1000000.0,
    tie_word_embeddings=False,
    head_dim=32,
    attention_bias=False,
    num_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    moe_intermediate_size=64,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],  # llama.cpp's qwen3moe graph has no dense layers, so the GGUF case could not have one
    use_sliding_window=False,
)
SEED = 7019
NAMES = ("gate_proj", "up_proj", "down_proj")


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, fe, v, dh = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.q_norm.weight"] = QK_NORM_GAIN * draw.norm(dh)  # (Dh,): one weight for every head
        w[p + "self_attn.k_norm.weight"] = QK_NORM_GAIN * draw.norm(dh)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w |= _moe.experts(draw, p + "mlp.", d, fe, NAMES)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    return cfg, _moe.fuse_experts(weights, NAMES)
