"""Qwen2-MoE: Qwen2 attention (q/k/v biases) and pre-norm blocks, a top-2-of-4 mixture of SwiGLU experts (not
renormalised, as in the released models) plus a shared expert scaled by sigmoid(shared_expert_gate(x))."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["Qwen2MoeForCausalLM"],
    model_type="qwen2_moe",
    rope_theta=1000000.0,
    tie_word_embeddings=False,
    num_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    moe_intermediate_size=64,
    shared_expert_intermediate_size=96,
    norm_topk_prob=False,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    use_sliding_window=False,
)
SEED = 7013
NAMES = ("gate_proj", "up_proj", "down_proj")


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, fe, fs = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    v, dh = cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        for proj, n, gain in (("q_proj", hq, 2.0), ("k_proj", hkv, 2.0), ("v_proj", hkv, 1.0)):
            w[p + f"self_attn.{proj}.weight"] = draw.linear(n, d, gain)
            w[p + f"self_attn.{proj}.bias"] = draw.normal(n, std=0.3)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w |= _moe.experts(draw, p + "mlp.", d, fe, NAMES)
        w[p + "mlp.shared_expert.gate_proj.weight"] = draw.linear(fs, d)
        w[p + "mlp.shared_expert.up_proj.weight"] = draw.linear(fs, d)
        w[p + "mlp.shared_expert.down_proj.weight"] = draw.linear(d, fs, 2.0)
        # gate logits of a few units: the sigmoid spans its range rather than sitting at 0.5
        w[p + "mlp.shared_expert_gate.weight"] = draw.linear(1, d, 3.0)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    return cfg, _moe.fuse_experts(weights, NAMES)
