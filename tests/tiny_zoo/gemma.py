"""Gemma (1): pre-norm blocks of (1 + w) RMSNorms, GeGLU, embeddings times sqrt(D), tied head; head_dim wider
than hidden / heads and one KV head, as in gemma-2b / gemma-7b."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["GemmaForCausalLM"],
    model_type="gemma",
    # the released Gemma configs say "gelu": transformers runs it as GELU-tanh, so must blazr
    hidden_act="gelu",
    head_dim=32,  # wider than hidden_size / heads (16), as gemma-7b's 256 vs 192
    num_key_value_heads=1,  # multi-query, as gemma-2b
    rope_theta=10000.0,  # llama.cpp's converter writes no RoPE base for Gemma: it assumes 10k
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    attention_bias=False,
)
SEED = 8001  # smallest greedy margin 0.026 over the four storages (bf16), 36 distinct ids of 64


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    root = np.float32(np.sqrt(d))
    # Gemma multiplies the embeddings by sqrt(D) and ties them to the head: a table sqrt(D) smaller keeps the
    # residual stream at the other tiny models' scale (std 0.5), a final norm sqrt(D) larger their logits
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5) / root}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)  # gain 2: peaked attention
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
    w["model.norm.weight"] = draw.norm(d) * root
    # Gemma's RMSNorm scales by 1 + w: store w so that the scales are the ones drawn above
    return {k: a - np.float32(1.0) if k.endswith("norm.weight") else a for k, a in w.items()}
