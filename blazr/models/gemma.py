"""Gemma (1) decoders (HF GemmaForCausalLM, model_type gemma; GGUF gemma).

Pre-norm blocks of RMSNorms that scale by (1 + w), a GeGLU MLP (GELU-tanh), embeddings times sqrt(D) and a
tied LM head; one RoPE table, q.k scaled by 1 / sqrt(head_dim), no sliding window. Gemma 2 (blazr.models.gemma2)
builds on this Model with its sandwich blocks and soft-capping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs, host_array
from blazr.models.decoder import DecoderLM, PreNormBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.norm import RMSNorm
from blazr.models.layers.rope import device_rope, theta_and_scaling


@dataclass
class ModelArgs(BaseModelArgs):
    # defaults are transformers' GemmaConfig (gemma-7b)
    model_type: str = "gemma"
    hidden_size: int = 3072
    intermediate_size: int = 24576
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 256  # given by the config, not hidden_size / heads (256 vs 192 in gemma-7b)
    # transformers 5 reads hidden_act and runs the legacy "gelu" of the released configs as GELU-tanh (the
    # activation Gemma was trained with); it ignores the hidden_activation key transformers 4 read instead
    hidden_act: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None  # (optional) transformers v5 spelling of theta + scaling
    max_position_embeddings: int = 8192
    vocab_size: int = 256_000
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # q, k, v and o biases together
    use_bidirectional_attention: bool | None = None
    gguf_architecture: str | None = None  # set when the weights come from a GGUF file

    # the config key naming the MLP activation (Gemma 2 reads hidden_activation)
    activation_key = "hidden_act"

    def __post_init__(self):
        if self.hidden_act == "gelu":
            self.hidden_act = "gelu_pytorch_tanh"
        self.rope_theta, self.rope_scaling = theta_and_scaling(
            self.rope_theta, self.rope_scaling, self.rope_parameters
        )
        if self.activation not in HF_ACTIVATIONS:
            known = ", ".join(HF_ACTIVATIONS)
            raise UnsupportedError(
                f"{self.activation_key} {self.activation!r} is not supported; use one of {known}"
            )
        if self.use_bidirectional_attention:
            raise UnsupportedError(
                "use_bidirectional_attention is not supported: blazr runs causal decoders only"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )

    @property
    def activation(self) -> str:
        return getattr(self, self.activation_key)

    @property
    def attention_scale(self) -> float:
        return self.head_dim**-0.5


class Model(DecoderLM):
    """A Gemma causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        a = args
        self.inv_freq, self.attention_scaling = device_rope(
            backend, a.head_dim, a.rope_theta, a.rope_scaling, a.max_position_embeddings
        )  # (R/2,) f32
        self.attention_shape = self.make_attention_shape(a)
        super().__init__(args, backend, dtype)
        # transformers multiplies by sqrt(D) held in the weights' dtype (the compute dtype here)
        self.embed_scale = backend.upload(
            np.full(a.hidden_size, math.sqrt(a.hidden_size), np.float32), self.dtype
        )  # (D,)

    def make_attention_shape(self, a: ModelArgs) -> AttentionShape:
        bias = a.attention_bias
        return AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            bias,
            bias,
            scale=a.attention_scale,
        )

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(self.be, dim, self.args.rms_norm_eps)

    def make_attention(self, layer: int, window: int = 0) -> Attention:
        return Attention(self.be, self.attention_shape, layer, self.inv_freq, window, self.attention_scaling)

    def make_mlp(self, layer: int) -> GatedMLP:
        a = self.args
        return GatedMLP(self.be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.activation], layer)

    def make_block(self, layer: int) -> PreNormBlock:
        d = self.args.hidden_size
        attn, mlp = self.make_attention(layer), self.make_mlp(layer)
        return PreNormBlock(layer, attn, mlp, self.make_norm(d), self.make_norm(d))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = super().sanitize(weights)
        if self.args.gguf_architecture is None:
            # Gemma's RMSNorm scales by (1 + w), in float32; llama.cpp's converter already stored 1 + w in GGUF
            for name in [n for n in weights if n.endswith("norm.weight")]:
                weights[name] = host_array(weights[name]).astype(np.float32) + np.float32(1.0)  # (D,)
        return weights


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES: dict[str, str] = {}  # the generic table (loaders.gguf.GGUF_TO_HF) names every tensor
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps HF's half-split RoPE rows


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a gemma file (src/models/gemma.cpp): the converter writes no RoPE base (llama.cpp
    uses 10k), q is scaled by 1 / sqrt(head_dim), and the head is always the token embeddings."""
    return config | {
        "model_type": "gemma",
        "architectures": ["GemmaForCausalLM"],
        "hidden_act": "gelu_pytorch_tanh",  # llama.cpp's LLM_FFN_GELU is the tanh approximation
        "tie_word_embeddings": True,
    }
