"""OLMoE: OLMo 2's whole-projection q/k RMSNorms in pre-norm blocks, a top-2-of-4 mixture of SwiGLU experts
whose weights are not renormalised (norm_topk_prob false, as in the released models)."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe
from tests.tiny_zoo.olmo2 import QK_NORM_GAIN

CONFIG = dict(
    architectures=["OlmoeForCausalLM"],
    model_type="olmoe",
    rope_theta=10000.0,
    tie_word_embeddings=False,
    attention_bias=False,
    num_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    norm_topk_prob=False,
)
SEED = 7013
NAMES = ("gate_proj", "up_proj", "down_proj")


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.q_norm.weight"] = QK_NORM_GAIN * draw.norm(hq)
        w[p + "self_attn.k_norm.weight"] = QK_NORM_GAIN * draw.norm(hkv)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w |= _moe.experts(draw, p + "mlp.", d, f, NAMES)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    return cfg, _moe.fuse_experts(weights, NAMES)
