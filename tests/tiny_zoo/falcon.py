"""Falcon, new decoder architecture (Falcon-40B's layout): the fused query_key_value grouped per KV head (2 KV
heads for 4 query heads: [q, q, k, v] for each group), attention and MLP in parallel with their own LayerNorms
(ln_attn, ln_mlp), a GELU MLP without biases, and the LM head tied to the embeddings."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["FalconForCausalLM"],
    model_type="falcon",
    new_decoder_architecture=True,
    num_kv_heads=2,
    multi_query=True,  # as in Falcon-40B's config; the new architecture uses num_kv_heads instead
    parallel_attn=True,
    bias=False,
    alibi=False,
    layer_norm_epsilon=1e-5,
    activation="gelu",
    ffn_hidden_size=256,  # 4 * hidden_size: llama.cpp's converter writes that, whatever the config says
    rope_theta=10000.0,  # the converter writes no base: llama.cpp's default
    tie_word_embeddings=True,
)
SEED = 9011
# attention and MLP outputs larger than the other models' (2): with the head tied to the embeddings, the two
# parallel layers must outweigh the token's own embedding in the residual, or the model repeats one token
OUT_GAIN = 3.0


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v = cfg["hidden_size"], cfg["ffn_hidden_size"], cfg["vocab_size"]
    h, hkv = cfg["num_attention_heads"], cfg["num_kv_heads"]
    dh = d // h
    w = {"transformer.word_embeddings.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"transformer.h.{i}."
        w[p + "ln_attn.weight"] = draw.norm(d)
        w[p + "ln_attn.bias"] = draw.normal(d, std=0.1)
        w[p + "ln_mlp.weight"] = draw.norm(d)
        w[p + "ln_mlp.bias"] = draw.normal(d, std=0.1)
        # q, k and v drawn as the other models' (q/k gain 2), then stored as Falcon does: for each KV group its
        # H / Hkv query heads, its k head and its v head
        q = draw.linear(h * dh, d, 2.0).reshape(hkv, h // hkv, dh, d)
        k = draw.linear(hkv * dh, d, 2.0).reshape(hkv, 1, dh, d)
        vv = draw.linear(hkv * dh, d).reshape(hkv, 1, dh, d)
        w[p + "self_attention.query_key_value.weight"] = np.concatenate([q, k, vv], axis=1).reshape(-1, d)
        w[p + "self_attention.dense.weight"] = draw.linear(d, h * dh, OUT_GAIN)
        w[p + "mlp.dense_h_to_4h.weight"] = draw.linear(f, d)
        w[p + "mlp.dense_4h_to_h.weight"] = draw.linear(d, f, OUT_GAIN)
    w["transformer.ln_f.weight"] = draw.norm(d)
    w["transformer.ln_f.bias"] = draw.normal(d, std=0.1)
    return w


def as_transformers(cfg: dict, w: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """FalconConfig computes head_dim (a read-only property) and ignores the shared tiny shape's
    intermediate_size and num_key_value_heads: the config without them."""
    drop = ("head_dim", "intermediate_size", "num_key_value_heads")
    return {k: val for k, val in cfg.items() if k not in drop}, w
