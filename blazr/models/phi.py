"""Phi-1, Phi-1.5 and Phi-2 (HF PhiForCausalLM, model_type phi; GGUF phi2).

Parallel blocks: one LayerNorm (with bias) feeds both attention and the MLP, whose outputs are added to the
residual together. Attention has q/k/v and output (`dense`) biases and rotates only the first
partial_rotary_factor of each head (0.4 in Phi-2); the MLP is fc1 -> GELU-tanh ("gelu_new") -> fc2 with biases;
a final LayerNorm `model.final_layernorm` and an untied LM head with a bias.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from blazr.errors import CheckpointError, UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs, host_array
from blazr.models.decoder import DecoderLM, ParallelBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import MLP
from blazr.models.layers.norm import LayerNorm
from blazr.models.layers.rope import device_rope, rope_type

# transformers' "gelu_new" is the tanh approximation of GELU (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))
ACTIVATIONS = HF_ACTIVATIONS | {"gelu_new": "gelu_tanh"}


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "phi"
    vocab_size: int = 51200
    hidden_size: int = 2048
    intermediate_size: int = 8192
    num_hidden_layers: int = 24
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None  # (optional) default: num_attention_heads
    head_dim: int | None = None  # (optional) default: hidden_size // num_attention_heads
    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 2048
    layer_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None  # (optional) transformers v5 spelling of theta + scaling
    partial_rotary_factor: float = 0.5  # transformers' PhiConfig default; Phi-2 configs say 0.4
    qk_layernorm: bool = False
    rope_dimension_count: int | None = None  # GGUF: llama.cpp's n_rot, the rotated features of a head

    ALIASES = {"n_positions": "max_position_embeddings"}

    def __post_init__(self):
        self.num_key_value_heads = self.num_key_value_heads or self.num_attention_heads
        self.head_dim = self.head_dim or self.hidden_size // self.num_attention_heads
        if self.rope_parameters:
            self.rope_theta = self.rope_parameters.get("rope_theta", self.rope_theta)
            self.partial_rotary_factor = self.rope_parameters.get(
                "partial_rotary_factor", self.partial_rotary_factor
            )
            if self.rope_scaling is None and rope_type(self.rope_parameters) != "default":
                self.rope_scaling = self.rope_parameters
        if self.qk_layernorm:
            # a LayerNorm (with bias) over each q and k head before RoPE; no released Phi model sets it
            raise UnsupportedError(
                "qk_layernorm=True (LayerNorm over each query and key head) is not supported"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            known = ", ".join(ACTIVATIONS)
            raise UnsupportedError(f"hidden_act {self.hidden_act!r} is not supported; use one of {known}")

    @property
    def rot_dim(self) -> int:
        if self.rope_dimension_count is not None:
            return self.rope_dimension_count
        return int(self.head_dim * self.partial_rotary_factor)


class Model(DecoderLM):
    """A Phi causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    NORM = "model.final_layernorm."
    HEAD_BIAS = True

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        a = args
        self.inv_freq, self.attention_scaling = device_rope(
            backend, a.rot_dim, a.rope_theta, a.rope_scaling, a.max_position_embeddings
        )  # (R/2,) f32
        self.attention_shape = AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            qkv_bias=True,
            o_bias=True,
            rot_dim=a.rot_dim,
            o_name="dense",
        )
        super().__init__(args, backend, dtype)

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(self.be, dim, self.args.layer_norm_eps, bias=True)

    def make_block(self, layer: int) -> ParallelBlock:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        act = ACTIVATIONS[a.hidden_act]
        mlp = MLP(be, a.hidden_size, a.intermediate_size, act, layer, bias=True, names=("fc1", "fc2"))
        return ParallelBlock(layer, attn, mlp, self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Older phi2 GGUF files (converted from the first Phi-2 release) keep q, k and v as one attn_qkv
        tensor, rows q, k, v: split into the three the attention declares (it stacks them again)."""
        weights = super().sanitize(weights)
        s = self.attention_shape
        sizes = (s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim)
        for name in [n for n in weights if ".self_attn.qkv_proj." in n]:
            tensor, prefix, suffix = weights.pop(name), *name.split("qkv_proj")
            if tensor.shape[0] != sum(sizes):
                raise CheckpointError(
                    f"tensor {name!r} has {tensor.shape[0]} rows, expected {sum(sizes)} (q, k and v)"
                )
            start = 0
            for proj, rows in zip(("q_proj", "k_proj", "v_proj"), sizes, strict=True):
                weights[f"{prefix}{proj}{suffix}"] = _row_slice(tensor, start, start + rows)
                start += rows
        return weights


def _row_slice(tensor, start: int, stop: int):
    """Rows start:stop of a checkpoint tensor, still lazy: a quantized one keeps its blocks (a block never spans
    two rows), so the attention can stack the three parts back into one packed matrix."""
    if not hasattr(tensor, "load"):
        return host_array(tensor)[start:stop]
    shape = (stop - start, *tensor.shape[1:])
    fields = {"shape": shape, "_read": lambda: tensor.load()[start:stop], "_release": None}
    if hasattr(tensor, "load_blocks"):
        fields["_read_blocks"] = lambda: tensor.load_blocks()[start:stop]  # (rows, bytes_per_row)
    return dataclasses.replace(tensor, **fields)


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "output_norm": "model.final_layernorm",
    "blk.{N}.attn_qkv": "model.layers.{N}.self_attn.qkv_proj",  # split in Model.sanitize
    "blk.{N}.attn_output": "model.layers.{N}.self_attn.dense",
    "blk.{N}.ffn_up": "model.layers.{N}.mlp.fc1",
    "blk.{N}.ffn_down": "model.layers.{N}.mlp.fc2",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps Phi-2's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a phi2 file (models/phi2.cpp): LayerNorm eps from attention.layer_norm_epsilon,
    n_rot from rope.dimension_count; feed_forward_length (4 x embedding in the converter) is the fc1 size."""
    return config | {
        "model_type": "phi",
        "architectures": ["PhiForCausalLM"],
        "layer_norm_eps": float(get("attention.layer_norm_epsilon")),
        "rope_dimension_count": int(get("rope.dimension_count", config["head_dim"])),
    }
