"""OLMo 2: norms after attention and MLP, an RMSNorm over the whole q and k projections."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["Olmo2ForCausalLM"],
    model_type="olmo2",
    rope_theta=500000.0,
    tie_word_embeddings=False,
    attention_bias=False,
)
SEED = 6001
# as tests/tiny_models.QK_NORM_GAIN: the q/k norms flatten attention, a gain makes it peaked again; over the
# whole projection each head's norm is ~sqrt(Dh) already, so a smaller gain does
QK_NORM_GAIN = 3.0


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.q_norm.weight"] = QK_NORM_GAIN * draw.norm(hq)
        w[p + "self_attn.k_norm.weight"] = QK_NORM_GAIN * draw.norm(hkv)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
        w[p + "post_feedforward_layernorm.weight"] = draw.norm(d)
    w["model.norm.weight"] = draw.norm(d)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w
