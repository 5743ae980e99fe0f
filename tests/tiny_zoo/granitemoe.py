"""Granite-MoE: Granite's four multipliers (each away from 1) on Llama attention, and a top-2-of-4 mixture of
SwiGLU experts stored fused as the checkpoints keep them (block_sparse_moe.input_linear (E, 2F, D) gate rows
then up rows, output_linear (E, D, F), router.layer (E, D)); transformers' router softmaxes the top-2 logits."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import _moe

CONFIG = dict(
    architectures=["GraniteMoeForCausalLM"],
    model_type="granitemoe",
    # head_dim stays 16 = hidden / heads: llama.cpp's converter drops head_dim for Granite
    rope_theta=10000.0,
    tie_word_embeddings=False,
    attention_bias=False,
    num_local_experts=_moe.NUM_EXPERTS,
    num_experts_per_tok=_moe.TOP_K,
    # as tests/tiny_zoo/granite.py: activations at the other tiny models' scale, each multiplier still visible
    embedding_multiplier=4.0,
    residual_multiplier=0.5,
    attention_multiplier=0.5,  # vs 1/sqrt(16) = 0.25
    logits_scaling=0.5,
)
SEED = 7015
NAMES = ("gate_proj", "up_proj", "down_proj")


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    # the embedding multiplier 4 is undone by a 4x smaller table, so the residual stream starts at std 0.5
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5 / 4.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 4.0)  # x2 against the residual multiplier 0.5
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        # per-expert draws (with _moe's router gain), then fused as the checkpoints store them
        e = _moe.experts(draw, "", d, f, NAMES)
        stack = {n: np.stack([e[f"experts.{x}.{n}.weight"] for x in range(_moe.NUM_EXPERTS)]) for n in NAMES}
        q = p + "block_sparse_moe."
        w[q + "router.layer.weight"] = e["gate.weight"]  # (E, D)
        w[q + "input_linear.weight"] = np.concatenate([stack["gate_proj"], stack["up_proj"]], axis=1)
        w[q + "output_linear.weight"] = 2.0 * stack["down_proj"]  # (E, D, F); x2 against the residual 0.5
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 2.0)  # the logit divisor 0.5 doubles it to the others' gain 4
    return w


def as_transformers(cfg: dict, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers 5's state-dict names, as its from_pretrained renames the checkpoint's."""
    renames = {
        "router.layer.weight": "router.weight",
        "input_linear.weight": "experts.gate_up_proj",
        "output_linear.weight": "experts.down_proj",
    }
    out = {}
    for name, a in weights.items():
        for old, new in renames.items():
            if name.endswith("block_sparse_moe." + old):
                name = name[: -len(old)] + new
        out[name] = a
    return cfg, out
