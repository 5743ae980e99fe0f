"""Falcon-RW (Falcon with alibi=True, as tiiuae/falcon-rw-1b): ALiBi position biases and no RoPE, the fused
query_key_value interleaved per head ([q_h, k_h, v_h], multi_query False), a sequential pre-norm block
(parallel_attn False: input_layernorm, then post_attention_layernorm before the MLP), biases on every
projection. The LM head is its own (tie_word_embeddings False; falcon-rw-1b ties it, and the falcon model
tests the tied path): tied, this model kept repeating one token for every seed tried.

Six heads, not a power of two, so the slopes include build_alibi_tensor's interleaved extra ones: 2^-2, 2^-4,
2^-6, 2^-8, then 2^-1, 2^-3. All are powers of two, so transformers' bfloat16 slope * position is exact for
the 72 positions and the reference has no rounding blazr's float32 ALiBi lacks.
"""

from __future__ import annotations

import numpy as np

CONFIG = dict(
    architectures=["FalconForCausalLM"],
    model_type="falcon",
    hidden_size=96,
    num_attention_heads=6,
    num_key_value_heads=6,  # one key/value head per query head (dropped for transformers, which derives it)
    head_dim=16,
    new_decoder_architecture=False,
    multi_query=False,
    parallel_attn=False,
    bias=True,
    alibi=True,
    layer_norm_epsilon=1e-5,
    activation="gelu",
    ffn_hidden_size=384,  # 4 * hidden_size, Falcon's default
    tie_word_embeddings=False,
)
SEED = 9123
OUT_GAIN = 3.0  # attention and MLP outputs larger than the other models' (2), as the falcon model's
# transformers' eager Falcon adds ALiBi twice (in the attention and again through the causal mask it folds
# ALiBi into); its SDPA path adds it once, as the original Falcon-RW code does
ATTN_IMPLEMENTATION = "sdpa"


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    d, f, v = cfg["hidden_size"], cfg["ffn_hidden_size"], cfg["vocab_size"]
    h = cfg["num_attention_heads"]
    dh = d // h
    w = {"transformer.word_embeddings.weight": draw.normal(v, d, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"transformer.h.{i}."
        w[p + "input_layernorm.weight"] = draw.norm(d)
        w[p + "input_layernorm.bias"] = draw.normal(d, std=0.1)
        # q, k and v drawn as the other models' (q/k gain 2), then stored as Falcon-RW does: rows
        # [q_h, k_h, v_h] for each head h, so a loader that skips the reordering reads the wrong rows
        q, k, vv = draw.linear(h * dh, d, 2.0), draw.linear(h * dh, d, 2.0), draw.linear(h * dh, d)
        bias = draw.normal(3, h * dh, std=0.3)  # (3, H Dh): q, k, v
        w[p + "self_attention.query_key_value.weight"] = (
            np.stack([q, k, vv]).reshape(3, h, dh, d).swapaxes(0, 1).reshape(-1, d)
        )
        w[p + "self_attention.query_key_value.bias"] = bias.reshape(3, h, dh).swapaxes(0, 1).reshape(-1)
        w[p + "self_attention.dense.weight"] = draw.linear(d, h * dh, OUT_GAIN)
        w[p + "self_attention.dense.bias"] = draw.normal(d, std=0.1)
        w[p + "post_attention_layernorm.weight"] = draw.norm(d)
        w[p + "post_attention_layernorm.bias"] = draw.normal(d, std=0.1)
        w[p + "mlp.dense_h_to_4h.weight"] = draw.linear(f, d)
        w[p + "mlp.dense_h_to_4h.bias"] = draw.normal(f, std=0.3)
        w[p + "mlp.dense_4h_to_h.weight"] = draw.linear(d, f, OUT_GAIN)
        w[p + "mlp.dense_4h_to_h.bias"] = draw.normal(d, std=0.1)
    w["transformer.ln_f.weight"] = draw.norm(d)
    w["transformer.ln_f.bias"] = draw.normal(d, std=0.1)
    w["lm_head.weight"] = draw.linear(v, d, 4.0)
    return w


def as_transformers(cfg: dict, w: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """FalconConfig computes head_dim (a read-only property) and ignores the shared tiny shape's
    intermediate_size and num_key_value_heads: the config without them."""
    drop = ("head_dim", "intermediate_size", "num_key_value_heads")
    return {k: val for k, val in cfg.items() if k not in drop}, w
