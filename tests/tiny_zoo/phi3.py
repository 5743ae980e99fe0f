"""Phi-3 / Phi-3.5 / Phi-4-mini: Llama's blocks with q/k/v stored as one qkv_proj tensor and gate/up as one
gate_up_proj, LongRoPE on the first 0.75 of each head (Phi-4-mini's partial rotary), and a 32-token sliding
window on every layer (shorter than the 8 + 64 test tokens, so it shows in the logits).

original_max_position_embeddings 4 is below the 8-token prompt, so transformers runs the long factors at every
position, which is the table blazr fixes at load for a model extended past its original length (see
layers.rope._longrope); max_position_embeddings 512 makes the attention factor sqrt(1 + ln 128 / ln 4) = 2.12.
The short factors differ from the long ones, so picking the wrong table shows in the logits.
"""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["Phi3ForCausalLM"],
    model_type="phi3",
    rope_theta=10000.0,
    partial_rotary_factor=0.75,  # 12 of 16 features rotate: 6 frequencies, 6 factors per list
    max_position_embeddings=512,
    original_max_position_embeddings=4,
    rope_scaling=dict(
        type="longrope",
        short_factor=[1.0, 1.02, 1.05, 1.1, 1.2, 1.3],
        long_factor=[1.0, 1.5, 3.0, 6.0, 12.0, 24.0],
    ),
    sliding_window=32,
    tie_word_embeddings=False,
    pad_token_id=None,  # Phi3Config's default 32000 is past the tiny vocabulary
)
SEED = 8002
# the LongRoPE attention factor multiplies q.k of the rotated features by 4.5: q/k gain 1 (not the others' 2)
# keeps attention about as peaked as in the other tiny models
QK_GAIN = 1.0


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        q, k, val = draw.linear(hq, d, QK_GAIN), draw.linear(hkv, d, QK_GAIN), draw.linear(hkv, d)
        w[p + "self_attn.qkv_proj.weight"] = np.concatenate([q, k, val])  # (Nq + 2 Nkv, D)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "mlp.gate_up_proj.weight"] = np.concatenate([draw.linear(f, d), draw.linear(f, d)])  # (2F, D)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w
