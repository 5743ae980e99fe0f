"""Gemma 3 text decoders (HF Gemma3ForCausalLM, model_type gemma3_text; GGUF gemma3).

Sandwich blocks (RMSNorm before and after attention and MLP), RMSNorms that scale by (1 + w), a GeGLU MLP
(GELU-tanh), qk-norm, embeddings times sqrt(D), tied LM head. Layers alternate sliding-window ("local",
RoPE base 10k) and full ("global", base 1M, with the config's rope scaling) attention, five local to one
global by default. The q.k scale is query_pre_attn_scalar ** -0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs, host_array
from blazr.models.decoder import DecoderLM, SandwichBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.norm import RMSNorm
from blazr.models.layers.rope import device_rope, rope_type

LOCAL, GLOBAL = "sliding_attention", "full_attention"


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "gemma3_text"
    hidden_size: int = 2304
    intermediate_size: int = 9216
    num_hidden_layers: int = 26
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int = 256
    hidden_activation: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0  # global layers
    rope_local_base_freq: float = 10_000.0  # local (sliding-window) layers
    rope_scaling: dict[str, Any] | None = None  # global layers only
    rope_parameters: dict[str, Any] | None = None  # (optional) transformers v5: per layer type
    max_position_embeddings: int = 131_072
    vocab_size: int = 262_208
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    query_pre_attn_scalar: float = 256
    sliding_window: int | None = 4096
    sliding_window_pattern: int = 6  # every 6th layer is global
    layer_types: list[str] | None = None  # (optional) LOCAL / GLOBAL per layer
    final_logit_softcapping: float | None = None
    attn_logit_softcapping: float | None = None
    gguf_architecture: str | None = None  # set when the weights come from a GGUF file

    ALIASES = {"hidden_act": "hidden_activation"}

    def __post_init__(self):
        if self.layer_types is None:
            p = self.sliding_window_pattern
            self.layer_types = [LOCAL if (i + 1) % p else GLOBAL for i in range(self.num_hidden_layers)]
        if len(self.layer_types) != self.num_hidden_layers:
            raise UnsupportedError(
                f"layer_types lists {len(self.layer_types)} layers, num_hidden_layers is {self.num_hidden_layers}"
            )
        if self.hidden_activation not in HF_ACTIVATIONS:
            raise UnsupportedError(f"hidden_activation {self.hidden_activation!r} is not supported")
        for name in ("final_logit_softcapping", "attn_logit_softcapping"):
            if getattr(self, name):
                raise UnsupportedError(f"Gemma 3 with {name} is not supported (no tanh op yet)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )

    def rope(self, layer_type: str) -> tuple[float, dict[str, Any] | None]:
        """(theta, scaling) of the local or global layers, from either config spelling."""
        per_type = (self.rope_parameters or {}).get(layer_type)
        if per_type is not None:
            scaling = per_type if rope_type(per_type) != "default" else None
            return float(per_type["rope_theta"]), scaling
        if layer_type == LOCAL:
            return self.rope_local_base_freq, None
        return self.rope_theta, self.rope_scaling


class Model(DecoderLM):
    """A Gemma 3 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        a = args
        self.rope_tables = {}  # layer type -> (inv_freq (Dh/2,) on the device, attention scaling)
        for kind in set(a.layer_types):
            theta, scaling = a.rope(kind)
            self.rope_tables[kind] = device_rope(
                backend, a.head_dim, theta, scaling, a.max_position_embeddings
            )
        self.attention_shape = AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            a.attention_bias,
            a.attention_bias,
            scale=a.query_pre_attn_scalar**-0.5,
            qk_norm_eps=a.rms_norm_eps,
        )
        super().__init__(args, backend, dtype)
        # transformers multiplies by sqrt(D) held in the weights' dtype (float32 here)
        self.embed_scale = backend.upload(
            np.full(a.hidden_size, math.sqrt(a.hidden_size), np.float32), self.dtype
        )

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(self.be, dim, self.args.rms_norm_eps)

    def make_block(self, layer: int) -> SandwichBlock:
        a, be = self.args, self.be
        kind = a.layer_types[layer]
        inv_freq, scaling = self.rope_tables[kind]
        window = a.sliding_window if kind == LOCAL and a.sliding_window else 0
        attn = Attention(be, self.attention_shape, layer, inv_freq, window, scaling)
        mlp = GatedMLP(be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_activation], layer)
        return SandwichBlock(layer, attn, mlp, lambda: self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = super().sanitize(weights)
        if self.args.gguf_architecture is None:
            # Gemma's RMSNorm scales by (1 + w); llama.cpp's converter already stored 1 + w in GGUF files
            for name in [n for n in weights if n.endswith("norm.weight")]:
                weights[name] = host_array(weights[name]).astype(np.float32) + np.float32(1.0)
        return weights


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.attn_q_norm": "model.layers.{N}.self_attn.q_norm",
    "blk.{N}.attn_k_norm": "model.layers.{N}.self_attn.k_norm",
    "blk.{N}.post_attention_norm": "model.layers.{N}.post_attention_layernorm",
    "blk.{N}.ffn_norm": "model.layers.{N}.pre_feedforward_layernorm",
    "blk.{N}.post_ffw_norm": "model.layers.{N}.post_feedforward_layernorm",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a gemma3 file (src/models/gemma3.cpp): the window pattern (default every 6th
    layer global), the local RoPE base (default 10k), and the attention scale 1/sqrt(head_dim), except for
    the 62-layer 27B (1/sqrt(hidden / heads))."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    scalar = config["hidden_size"] // heads if layers == 62 else config["head_dim"]
    out = config | {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "query_pre_attn_scalar": scalar,
        "rope_local_base_freq": float(get("rope.freq_base_swa", 10_000.0)),
        "final_logit_softcapping": get("final_logit_softcapping", None),
    }
    pattern = get("attention.sliding_window_pattern", 6)
    if not config.get("sliding_window"):
        out["layer_types"] = [GLOBAL] * layers
    elif isinstance(pattern, list):  # one flag a layer: True for sliding-window layers
        out["layer_types"] = [LOCAL if flag else GLOBAL for flag in pattern]
    else:
        out["sliding_window_pattern"] = int(pattern)
    return out
