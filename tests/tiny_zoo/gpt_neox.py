"""GPT-NeoX / Pythia: a fused query_key_value whose rows are interleaved per head, RoPE on a quarter of each
head (rotary_pct 0.25, as Pythia), parallel residual with two LayerNorms, a GELU MLP, all with biases."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["GPTNeoXForCausalLM"],
    model_type="gpt_neox",
    hidden_act="gelu",
    num_key_value_heads=4,  # GPT-NeoX has no GQA: one key/value head per query head
    layer_norm_eps=1e-5,
    rotary_pct=0.25,  # 4 of each head's 16 features rotate
    rotary_emb_base=10000.0,  # llama.cpp's converter writes no base: its default
    use_parallel_residual=True,
    attention_bias=True,
    tie_word_embeddings=False,
)
SEED = 8018


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    h = cfg["num_attention_heads"]
    w = {"gpt_neox.embed_in.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "input_layernorm.bias"] = draw.normal(d, std=0.1)
        # q, k and v drawn as the other models' (q/k gain 2), then stored as GPT-NeoX does: rows [q_h, k_h, v_h]
        # for each head h, so a loader that skips the reordering reads the wrong rows
        q, k, vv = draw.linear(h * dh, d, 2.0), draw.linear(h * dh, d, 2.0), draw.linear(h * dh, d)
        bias = draw.normal(3, h * dh, std=0.3)  # (3, H Dh): q, k, v
        w[p + "attention.query_key_value.weight"] = (
            np.stack([q, k, vv]).reshape(3, h, dh, d).swapaxes(0, 1).reshape(-1, d)
        )
        w[p + "attention.query_key_value.bias"] = bias.reshape(3, h, dh).swapaxes(0, 1).reshape(-1)
        w[p + "attention.dense.weight"] = draw.linear(d, h * dh, 2.0)
        w[p + "attention.dense.bias"] = draw.normal(d, std=0.1)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "post_attention_layernorm.bias"] = draw.normal(d, std=0.1)
        w[p + "mlp.dense_h_to_4h.weight"] = draw.linear(f, d)
        w[p + "mlp.dense_h_to_4h.bias"] = draw.normal(f, std=0.3)
        w[p + "mlp.dense_4h_to_h.weight"] = draw.linear(d, f, 2.0)
        w[p + "mlp.dense_4h_to_h.bias"] = draw.normal(d, std=0.1)
    w["gpt_neox.final_layer_norm.weight"] = draw.norm(d)
    w["gpt_neox.final_layer_norm.bias"] = draw.normal(d, std=0.1)
    w["embed_out.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, w: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """transformers renames the checkpoint's embed_out to lm_head when it loads a file (its conversion_mapping);
    make_reference.py fills the model with load_state_dict, which does not."""
    return cfg, {("lm_head.weight" if k == "embed_out.weight" else k): a for k, a in w.items()}
