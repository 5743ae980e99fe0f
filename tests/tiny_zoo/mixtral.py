"""Mixtral: Mistral attention and pre-norm blocks, a top-2-of-4 mixture of SwiGLU experts, weights renormalised
over the two chosen. Stored as checkpoints on disk are: `block_sparse_moe.experts.<e>.w1/w3/w2`."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["MixtralForCausalLM"],
    model_type="mixtral",
    rope_theta=1000000.0,
    tie_word_embeddings=False,
    num_local_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    sliding_window=None,
)
SEED = 7009
NAMES = ("w1", "w3", "w2")


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
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w |= _moe.experts(draw, p + "block_sparse_moe.", d, f, NAMES)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers 5 renames block_sparse_moe to mlp and fuses the experts when it loads a checkpoint."""
    renamed = {k.replace(".block_sparse_moe.", ".mlp."): a for k, a in weights.items()}
    return cfg, _moe.fuse_experts(renamed, NAMES)
