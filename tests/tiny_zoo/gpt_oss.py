"""GPT-OSS: attention with q/k/v/o biases and a learnt sink logit per head, every other layer a 16-token
sliding window, YaRN RoPE (not truncated) over neox halves; a top-2-of-4 mixture whose router has a bias and
whose experts have biases and GPT-OSS's clamped SwiGLU (gate clamped above at swiglu_limit, up to
+-swiglu_limit, gate * sigmoid(alpha gate) * (up + 1)). Expert weights are in transformers' own layout:
gate_up_proj (E, D, 2F) with gate and up columns interleaved, down_proj (E, F, D)."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["GptOssForCausalLM"],
    model_type="gpt_oss",
    num_hidden_layers=4,
    head_dim=16,
    num_local_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    intermediate_size=32,  # each expert's width
    sliding_window=16,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    rope_parameters=dict(
        rope_type="yarn",
        rope_theta=150000.0,
        factor=4.0,
        beta_fast=32.0,
        beta_slow=1.0,
        truncate=False,
        original_max_position_embeddings=128,
    ),
    swiglu_alpha=1.702,
    swiglu_limit=7.0,
    attention_bias=True,
    tie_word_embeddings=False,
)
SEED = 10005


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    e, h = cfg["num_local_experts"], cfg["num_attention_heads"]
    hq, hkv = h * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        for proj, n, gain in (("q_proj", hq, 2.0), ("k_proj", hkv, 2.0), ("v_proj", hkv, 1.0)):
            w[p + f"self_attn.{proj}.weight"] = draw.linear(n, d, gain)
            w[p + f"self_attn.{proj}.bias"] = draw.normal(n, std=0.3)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "self_attn.o_proj.bias"] = draw.normal(d, std=0.3)
        w[p + "self_attn.sinks"] = draw.normal(h, std=1.0)  # logits of the size of the scores: they matter
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "mlp.router.weight"] = draw.linear(e, d, _moe.ROUTER_GAIN)
        w[p + "mlp.router.bias"] = draw.normal(e, std=0.5)
        # a gain of 4: some gate and up values pass the clamp at 7, so it shows in the output
        w[p + "mlp.experts.gate_up_proj"] = np.stack([draw.linear(2 * f, d, 4.0).T for _ in range(e)])
        w[p + "mlp.experts.gate_up_proj_bias"] = draw.normal(e, 2 * f, std=0.5)
        w[p + "mlp.experts.down_proj"] = np.stack([draw.linear(d, f, 2.0).T for _ in range(e)])
        w[p + "mlp.experts.down_proj_bias"] = draw.normal(e, d, std=0.3)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return {k: np.ascontiguousarray(a) for k, a in w.items()}
