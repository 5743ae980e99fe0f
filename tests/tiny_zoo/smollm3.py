"""SmolLM3: Llama whose every 4th layer has no RoPE (NoPE); four layers so one of them is NoPE."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["SmolLM3ForCausalLM"],
    model_type="smollm3",
    num_hidden_layers=4,  # layers 0-2 rotate, layer 3 has no positional encoding (interval 4, as llama.cpp assumes)
    no_rope_layer_interval=4,
    rope_theta=2000000.0,
    tie_word_embeddings=True,
    attention_bias=False,
    mlp_bias=False,
    use_sliding_window=False,
    pad_token_id=None,  # the default, 128004, lies outside the tiny vocabulary
)
SEED = 8001


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
        w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
    w["model.norm.weight"] = draw.norm(d)
    return w
