"""Command-R: parallel blocks over one bias-free LayerNorm, interleaved RoPE, a tied head times logit_scale.

llama.cpp's command-r has no output tensor, so the head must be tied. The embeddings are drawn small (std 0.2,
not 0.5) so that the layers, not the token's own embedding, dominate the residual (at 0.5 every seed tried
repeated tokens); the final norm's 10x gives the logits the other tiny models' scale back."""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["CohereForCausalLM"],
    model_type="cohere",
    rope_theta=10000.0,
    layer_norm_eps=1e-5,
    logit_scale=0.25,  # real models use 0.0625
    use_qk_norm=False,
    tie_word_embeddings=True,
    attention_bias=False,
    pad_token_id=0,
)
SEED = 9007


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh
    w = {"model.embed_tokens.weight": draw.normal(v, d, std=0.2)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "self_attn.q_proj.weight"] = draw.linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = draw.linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = draw.linear(hkv, d)
        w[p + "self_attn.o_proj.weight"] = draw.linear(d, hq, 2.0)
        w[p + "mlp.gate_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.up_proj.weight"] = draw.linear(f, d)
        w[p + "mlp.down_proj.weight"] = draw.linear(d, f, 2.0)
    w["model.norm.weight"] = draw.norm(d) * np.float32(10.0)
    return w
