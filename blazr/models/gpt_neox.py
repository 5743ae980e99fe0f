"""GPT-NeoX and Pythia (HF GPTNeoXForCausalLM, model_type gpt_neox; GGUF gptneox).

LayerNorms with biases; one fused query_key_value projection whose rows are interleaved per head
([q_h, k_h, v_h] for each head h), reordered to q, k, v rows at load; RoPE on the first rotary_pct of each
head only (a quarter in Pythia); an MLP dense_h_to_4h -> GELU -> dense_4h_to_h with biases. With
use_parallel_residual (every released model) attention and MLP read the same input through their own norms
(x + attn(ln1(x)) + mlp(ln2(x))), else the block is pre-norm. The LM head (embed_out) is a separate matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs, host_array
from blazr.models.decoder import DecoderLM, ParallelBlock, PreNormBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module
from blazr.models.layers.norm import LayerNorm
from blazr.models.layers.rope import device_rope, rope_type

QKV = "query_key_value"


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "gpt_neox"
    hidden_size: int = 6144
    intermediate_size: int = 24576
    num_hidden_layers: int = 44
    num_attention_heads: int = 64
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-5
    rotary_pct: float = 0.25  # the rotated fraction of each head
    rotary_emb_base: float = 10000.0
    # (optional) transformers v5 spelling: rope_theta, partial_rotary_factor and the scaling in one dict; it
    # wins over rotary_pct / rotary_emb_base, as in transformers' GPTNeoXConfig
    rope_parameters: dict[str, Any] | None = None
    rope_scaling: dict[str, Any] | None = None  # (optional) older spelling of a scaled rope_parameters
    rope_dimension_count: int | None = None  # GGUF: the rotated features per head, written as a count
    max_position_embeddings: int = 2048
    vocab_size: int = 50432
    tie_word_embeddings: bool = False
    use_parallel_residual: bool = True
    attention_bias: bool = True  # biases of query_key_value and dense
    gguf_architecture: str | None = None  # set when the weights come from a GGUF file

    ALIASES = {"rope_theta": "rotary_emb_base", "partial_rotary_factor": "rotary_pct"}

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise UnsupportedError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}"
            )
        if self.hidden_act not in HF_ACTIVATIONS:
            known = ", ".join(HF_ACTIVATIONS)
            raise UnsupportedError(f"hidden_act {self.hidden_act!r} is not supported; use one of {known}")
        # transformers: rope_parameters = rope_scaling or rope_parameters, then theta and the rotary fraction
        # default to rotary_emb_base and rotary_pct
        params = dict(self.rope_scaling or self.rope_parameters or {})
        self.rotary_emb_base = float(params.get("rope_theta", self.rotary_emb_base))
        self.rotary_pct = float(params.get("partial_rotary_factor", self.rotary_pct))
        self.rope_scaling = params if rope_type(params) != "default" else None

    @property
    def num_key_value_heads(self) -> int:
        return self.num_attention_heads  # no GQA in GPT-NeoX

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def rot_dim(self) -> int:
        if self.rope_dimension_count is not None:
            return self.rope_dimension_count
        return int(self.head_dim * self.rotary_pct)


class Model(DecoderLM):
    """A GPT-NeoX causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    EMBED, LAYERS, NORM, HEAD = (
        "gpt_neox.embed_in.",
        "gpt_neox.layers.{}.",
        "gpt_neox.final_layer_norm.",
        "embed_out.",
    )
    # checkpoint prefixes of a layer's (attention norm, attention, MLP norm, MLP)
    NAMES = ("input_layernorm.", "attention.", "post_attention_layernorm.", "mlp.")

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        a = args
        self.inv_freq, self.attention_scaling = device_rope(
            backend, a.rot_dim, a.rotary_emb_base, a.rope_scaling, a.max_position_embeddings
        )  # (R/2,) f32
        self.attention_shape = AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            a.attention_bias,
            a.attention_bias,
            a.rot_dim,
            fused_qkv=QKV,
            o_name="dense",
        )
        super().__init__(args, backend, dtype)

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(self.be, dim, self.args.layer_norm_eps)

    def make_block(self, layer: int) -> Module:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        act = HF_ACTIVATIONS[a.hidden_act]
        mlp = MLP(
            be, a.hidden_size, a.intermediate_size, act, layer, True, names=("dense_h_to_4h", "dense_4h_to_h")
        )
        norms = self.make_norm(a.hidden_size), self.make_norm(a.hidden_size)
        if a.use_parallel_residual:
            return ParallelBlock(layer, attn, mlp, *norms, names=self.NAMES)
        return PreNormBlock(layer, attn, mlp, *norms, names=self.NAMES)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # old checkpoints save the causal-mask buffers attention.bias / attention.masked_bias (transformers
        # ignores them too): not weights
        weights = {
            k: v for k, v in weights.items() if not k.endswith((".attention.bias", ".attention.masked_bias"))
        }
        if "lm_head.weight" in weights and self.HEAD + "weight" not in weights:
            # transformers 5 names the LM head lm_head in the model (its conversion_mapping renames embed_out)
            weights[self.HEAD + "weight"] = weights.pop("lm_head.weight")
        weights = super().sanitize(weights)
        if self.args.gguf_architecture is None:  # llama.cpp's converter already wrote q, k, v rows
            h, dh = self.args.num_attention_heads, self.args.head_dim
            for name in [n for n in weights if n.endswith(f".attention.{QKV}.weight")]:
                weights[name] = per_head_to_qkv_rows(host_array(weights[name]), h, dh)
            for name in [n for n in weights if n.endswith(f".attention.{QKV}.bias")]:
                weights[name] = per_head_to_qkv_rows(host_array(weights[name]), h, dh)
        return weights


def per_head_to_qkv_rows(w: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    """GPT-NeoX's fused rows [q_0, k_0, v_0, q_1, k_1, v_1, ...] (Dh rows each) -> all q rows, all k rows, all
    v rows: w (3 H Dh, ...) -> (3 H Dh, ...), a weight (with its D columns) or a bias."""
    rest = w.shape[1:]
    return np.ascontiguousarray(w.reshape(heads, 3, head_dim, *rest).swapaxes(0, 1).reshape(w.shape))


# ---- GGUF: how llama.cpp's converter wrote this family ------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "token_embd": "gpt_neox.embed_in",
    "output_norm": "gpt_neox.final_layer_norm",
    "output": "embed_out",
    "blk.{N}.attn_norm": "gpt_neox.layers.{N}.input_layernorm",
    # GPTNeoXModel.modify_tensors reordered the per-head rows to q, k, v: what sanitize makes of HF's
    "blk.{N}.attn_qkv": "gpt_neox.layers.{N}.attention.query_key_value",
    "blk.{N}.attn_output": "gpt_neox.layers.{N}.attention.dense",
    "blk.{N}.ffn_norm": "gpt_neox.layers.{N}.post_attention_layernorm",
    "blk.{N}.ffn_up": "gpt_neox.layers.{N}.mlp.dense_h_to_4h",
    "blk.{N}.ffn_down": "gpt_neox.layers.{N}.mlp.dense_4h_to_h",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the rows were reordered, not permuted for RoPE


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a gptneox file (src/models/gptneox.cpp): LayerNorms with
    attention.layer_norm_epsilon, use_parallel_residual, rope.dimension_count rotated features per head
    (rotary_pct * head_dim at conversion), and biases on every projection (llama.cpp requires them). The
    activation is not written: transformers' GPT-NeoX default, exact GELU."""
    return config | {
        "model_type": "gpt_neox",
        "architectures": ["GPTNeoXForCausalLM"],
        "layer_norm_eps": float(get("attention.layer_norm_epsilon")),
        "use_parallel_residual": bool(get("use_parallel_residual")),
        "rope_dimension_count": int(get("rope.dimension_count", config["head_dim"])),
        "attention_bias": True,
        "hidden_act": "gelu",
    }
