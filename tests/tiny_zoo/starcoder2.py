"""StarCoder2: LayerNorms with biases, GQA attention and a c_fc/c_proj GELU-tanh MLP, all with biases, and a
16-token sliding window on every layer (shorter than the 8 + 64 test tokens, so the window shows in the logits).
"""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["Starcoder2ForCausalLM"],
    model_type="starcoder2",
    hidden_act="gelu_pytorch_tanh",
    norm_epsilon=1e-5,
    use_bias=True,
    sliding_window=16,
    rope_theta=100000.0,
    tie_word_embeddings=False,
)
SEED = 7014


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        # LayerNorm biases away from 0, so a dropped one shows in the logits
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "input_layernorm.bias"] = draw.normal(d, std=0.1)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.q_proj.bias"] = draw.normal(hq, std=0.3)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.k_proj.bias"] = draw.normal(hkv, std=0.3)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.v_proj.bias"] = draw.normal(hkv, std=0.3)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "self_attn.o_proj.bias"] = draw.normal(d, std=0.1)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "post_attention_layernorm.bias"] = draw.normal(d, std=0.1)
        w[p + "mlp.c_fc.weight"] = draw.linear(f, d)
        w[p + "mlp.c_fc.bias"] = draw.normal(f, std=0.3)
        w[p + "mlp.c_proj.weight"] = draw.linear(d, f, 2.0)
        w[p + "mlp.c_proj.bias"] = draw.normal(d, std=0.1)
    w["model.norm.weight"] = draw.norm(d)
    w["model.norm.bias"] = draw.normal(d, std=0.1)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w
