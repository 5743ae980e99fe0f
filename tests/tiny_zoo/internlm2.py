"""InternLM2: Llama's computation under InternLM2's names, q/k/v packed in one grouped `wqkv`.

transformers has no InternLM2 class (the checkpoints ship remote code), so the reference runs the equivalent
Llama checkpoint that `as_transformers` makes: wqkv split into q_proj / k_proj / v_proj and every name mapped.
"""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["InternLM2ForCausalLM"],
    model_type="internlm2",
    rope_theta=1000000.0,
    rope_scaling=None,
    bias=False,
    tie_word_embeddings=False,
    head_dim=16,  # = hidden / heads, as InternLM2 always has
)
SEED = 10001


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    h, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = {"model.tok_embeddings.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "attention_norm.weight"] = draw.norm(d)
        q, k, vv = draw.linear(h * dh, d, 2.0), draw.linear(hkv * dh, d, 2.0), draw.linear(hkv * dh, d)
        w[p + "attention.wqkv.weight"] = _grouped(q, k, vv, h, hkv, dh)
        w[p + "attention.wo.weight"] = draw.linear(d, h * dh, 2.0)
        w[p + "ffn_norm.weight"] = draw.norm(d)
        w[p + "feed_forward.w1.weight"] = draw.linear(f, d)  # gate
        w[p + "feed_forward.w3.weight"] = draw.linear(f, d)  # up
        w[p + "feed_forward.w2.weight"] = draw.linear(d, f, 2.0)  # down
    w["model.norm.weight"] = draw.norm(d)
    w["output.weight"] = draw.linear(v, d, 4.0)
    return w


def _grouped(q, k, v, h, hkv, dh) -> np.ndarray:
    """q (H*Dh, D), k and v (Hkv*Dh, D) -> InternLM2's wqkv rows: per KV head, its query heads, k, v."""
    qg = q.reshape(hkv, h // hkv, dh, -1)  # (Hkv, H/Hkv, Dh, D)
    kv = np.stack([k.reshape(hkv, dh, -1), v.reshape(hkv, dh, -1)], axis=1)  # (Hkv, 2, Dh, D)
    return np.concatenate([qg, kv], axis=1).reshape(-1, q.shape[1])


def as_transformers(cfg: dict, w: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """The equivalent Llama config and weights, for transformers' reference run."""
    h, hkv, dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    config = {k: val for k, val in cfg.items() if k != "bias"} | {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "mlp_bias": False,
    }
    names = {
        "model.tok_embeddings.": "model.embed_tokens.",
        "output.": "lm_head.",
        "attention_norm.": "input_layernorm.",
        "ffn_norm.": "post_attention_layernorm.",
        "attention.wo.": "self_attn.o_proj.",
        "feed_forward.w1.": "mlp.gate_proj.",
        "feed_forward.w3.": "mlp.up_proj.",
        "feed_forward.w2.": "mlp.down_proj.",
    }
    out = {}
    for name, a in w.items():
        if name.endswith("attention.wqkv.weight"):
            p = name[: -len("attention.wqkv.weight")]
            g = a.reshape(hkv, h // hkv + 2, dh, -1)  # (Hkv, H/Hkv + 2, Dh, D)
            out[p + "self_attn.q_proj.weight"] = g[:, :-2].reshape(h * dh, -1)
            out[p + "self_attn.k_proj.weight"] = g[:, -2].reshape(hkv * dh, -1)
            out[p + "self_attn.v_proj.weight"] = g[:, -1].reshape(hkv * dh, -1)
            continue
        for old, new in names.items():
            name = name.replace(old, new)
        out[name] = a
    return config, out
