"""Gemma 2: sandwich norms, attention and final logit soft-capping small enough that tanh is far from
linear, even layers sliding-window with a window shorter than the 72 test tokens."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["Gemma2ForCausalLM"],
    model_type="gemma2",
    hidden_act="gelu_pytorch_tanh",  # ignored by transformers' Gemma 2, which reads hidden_activation
    hidden_activation="gelu_pytorch_tanh",
    # four layers, transformers' and llama.cpp's default pattern: 0 and 2 sliding-window, 1 and 3 full
    num_hidden_layers=4,
    sliding_window=16,
    rope_theta=10000.0,  # llama.cpp's converter writes no RoPE base for Gemma 2: it assumes 10k
    query_pre_attn_scalar=16,  # = head_dim, as llama.cpp assumes for every size but 27B
    rms_norm_eps=1e-6,
    # Real Gemma 2 caps are 50 and 30, which the tiny model's scores and logits never reach. Its scaled q.k
    # scores have mean |s| ~3.5 and reach ~20, its logits std ~4 and reach ~20: caps of 8 and 15 squash the
    # large ones hard (tanh(20 / 8) = 0.99) and bend even the typical ones
    attn_logit_softcapping=8.0,
    final_logit_softcapping=15.0,
    tie_word_embeddings=True,
    attention_bias=False,
)
SEED = 9010  # smallest greedy margin 0.034 over the four storages; most seeds near it had < 0.01 in bf16


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    root = np.float32(np.sqrt(d))
    # as tests/tiny_zoo/gemma.py: undo sqrt(D) on the tied embeddings, keep the logits at the others' scale
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5) / root}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)  # gain 2: peaked attention
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "pre_feedforward_layernorm.weight"] = draw.norm(d)
        w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
        w[p + "post_feedforward_layernorm.weight"] = draw.norm(d)
    w["model.norm.weight"] = draw.norm(d) * root
    # Gemma's RMSNorm scales by 1 + w: store w so that the scales are the ones drawn above
    return {k: a - np.float32(1.0) if k.endswith("norm.weight") else a for k, a in w.items()}
