"""Falcon (HF FalconForCausalLM, model_type falcon; GGUF falcon).

LayerNorms with biases, one fused query_key_value projection, RoPE on whole heads, an MLP dense_h_to_4h ->
GELU -> dense_4h_to_h, and (config `bias`) biases on every projection or none. Attention and MLP run side by
side (parallel_attn): Falcon-7B shares one input_layernorm between them, the new decoder architecture
(Falcon-40B/180B) gives each its own (ln_attn, ln_mlp), Falcon2-11B one (num_ln_in_parallel_attn 1). Without
parallel_attn the block is pre-norm. The fused rows come in one of three layouts, reordered to q, k, v rows at
load: new_decoder_architecture groups them per KV head ([q * H/Hkv, k, v] for each of the Hkv groups),
multi_query stores all q rows then one k and one v head (already q, k, v), and neither interleaves them per
head ([q_h, k_h, v_h]).

Falcon-RW (alibi True; per-head rows, sequential block, biases) has no RoPE: ALiBi biases the scores instead,
slope_h * key position added before the 1/sqrt(Dh) scale, with transformers' build_alibi_tensor slopes.
transformers rounds slope * position to bfloat16 there; blazr keeps the float32 product (as llama.cpp's ALiBi
does): the same where the slopes are powers of two (up to 8 heads) and positions stay below 256, else off by
bfloat16's rounding (about 2^-8 of slope * position). transformers' eager attention adds ALiBi twice (again
through the causal mask); its SDPA path, the default, adds it once, as blazr does. llama.cpp's converter
cannot convert Falcon-RW (it maps no post_attention_layernorm: llama.cpp's falcon is parallel-only, with
RoPE), so there is no Falcon-RW GGUF.
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
from blazr.models.layers.rope import device_rope, theta_and_scaling

QKV = "query_key_value"
GROUPED, MULTI_QUERY, PER_HEAD = "grouped", "multi_query", "per_head"  # the fused rows' layouts


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "falcon"
    hidden_size: int = 4544
    num_hidden_layers: int = 32
    num_attention_heads: int = 71
    num_kv_heads: int | None = None  # (optional) default: num_attention_heads; used by the new architecture
    new_decoder_architecture: bool = False
    multi_query: bool = True  # (old architecture) one key/value head
    parallel_attn: bool = True
    num_ln_in_parallel_attn: int | None = None  # (new architecture) default 2: ln_attn and ln_mlp
    bias: bool = False  # biases on query_key_value, dense and the MLP projections
    alibi: bool = False
    layer_norm_epsilon: float = 1e-5
    ffn_hidden_size: int | None = None  # (optional) default: 4 * hidden_size
    activation: str = "gelu"
    rope_theta: float = 10000.0
    rope_parameters: dict[str, Any] | None = None  # (optional) transformers v5 spelling of theta + scaling
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    vocab_size: int = 65024
    tie_word_embeddings: bool = True
    gguf_architecture: str | None = None  # set when the weights come from a GGUF file

    # the RefinedWeb configs' spellings
    ALIASES = {
        "n_embed": "hidden_size",
        "n_layer": "num_hidden_layers",
        "n_head": "num_attention_heads",
        "n_head_kv": "num_kv_heads",
    }

    def __post_init__(self):
        if self.new_decoder_architecture and not self.parallel_attn:
            # transformers builds no norm it then reads for this combination
            raise UnsupportedError(
                "Falcon with new_decoder_architecture and parallel_attn=False is not supported"
            )
        if self.hidden_size % self.num_attention_heads:
            raise UnsupportedError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}"
            )
        if self.activation not in HF_ACTIVATIONS:
            known = ", ".join(HF_ACTIVATIONS)
            raise UnsupportedError(f"activation {self.activation!r} is not supported; use one of {known}")
        self.num_kv_heads = self.num_kv_heads or self.num_attention_heads
        self.ffn_hidden_size = self.ffn_hidden_size or 4 * self.hidden_size
        if self.new_decoder_architecture and self.num_ln_in_parallel_attn is None:
            self.num_ln_in_parallel_attn = 2
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_kv_heads {self.num_key_value_heads}"
            )
        self.rope_theta, self.rope_scaling = theta_and_scaling(
            self.rope_theta, self.rope_scaling, self.rope_parameters
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_key_value_heads(self) -> int:
        """KV heads as transformers counts them: the config's in the new architecture, else one (multi_query)
        or one per query head."""
        if self.new_decoder_architecture:
            return self.num_kv_heads
        return 1 if self.multi_query else self.num_attention_heads

    @property
    def qkv_layout(self) -> str:
        if self.new_decoder_architecture:
            return GROUPED
        return MULTI_QUERY if self.multi_query else PER_HEAD

    @property
    def two_norms(self) -> bool:
        """ln_attn and ln_mlp (else one input_layernorm, shared by attention and MLP when parallel)."""
        return self.new_decoder_architecture and self.num_ln_in_parallel_attn == 2


class Model(DecoderLM):
    """A Falcon causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    EMBED, LAYERS, NORM, HEAD = (
        "transformer.word_embeddings.",
        "transformer.h.{}.",
        "transformer.ln_f.",
        "lm_head.",
    )

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        a = args
        # (Dh/2,) on the device; none with ALiBi (Falcon-RW), which replaces RoPE
        self.inv_freq, self.attention_scaling = (
            (None, 1.0)
            if a.alibi
            else device_rope(backend, a.head_dim, a.rope_theta, a.rope_scaling, a.max_position_embeddings)
        )
        self.attention_shape = AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            a.bias,
            a.bias,
            fused_qkv=QKV,
            o_name="dense",
            alibi=a.alibi,
        )
        super().__init__(args, backend, dtype)

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(self.be, dim, self.args.layer_norm_epsilon)

    def make_block(self, layer: int) -> Module:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        act = HF_ACTIVATIONS[a.activation]
        mlp = MLP(
            be, a.hidden_size, a.ffn_hidden_size, act, layer, a.bias, names=("dense_h_to_4h", "dense_4h_to_h")
        )
        d = a.hidden_size
        if a.two_norms:
            names = ("ln_attn.", "self_attention.", "ln_mlp.", "mlp.")
            return ParallelBlock(layer, attn, mlp, self.make_norm(d), self.make_norm(d), names=names)
        if a.parallel_attn:  # one norm read by both
            names = ("input_layernorm.", "self_attention.", "", "mlp.")
            return ParallelBlock(layer, attn, mlp, self.make_norm(d), None, names=names)
        names = ("input_layernorm.", "self_attention.", "post_attention_layernorm.", "mlp.")
        return PreNormBlock(layer, attn, mlp, self.make_norm(d), self.make_norm(d), names=names)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = super().sanitize(weights)
        a = self.args
        if a.gguf_architecture is not None:
            # llama.cpp's converter wrote q, k, v rows already; its attn_norm (mapped to input_layernorm) is
            # ln_mlp when a second norm (attn_norm_2: ln_attn) is there
            if a.two_norms:
                weights = {k.replace(".input_layernorm.", ".ln_mlp."): v for k, v in weights.items()}
            return weights
        for name in [n for n in weights if n.endswith((f".{QKV}.weight", f".{QKV}.bias"))]:
            weights[name] = fused_to_qkv_rows(
                host_array(weights[name]), a.qkv_layout, a.num_attention_heads, a.num_key_value_heads
            )
        return weights


def fused_to_qkv_rows(w: np.ndarray, layout: str, heads: int, kv_heads: int) -> np.ndarray:
    """Falcon's fused query_key_value rows in `layout` -> all q rows, then k, then v: w ((H + 2 Hkv) Dh, ...) ->
    the same shape, a weight (with its D columns) or a bias."""
    if layout == MULTI_QUERY:  # [q_0 .. q_{H-1}, k, v]: q, k, v already
        return w
    rest = w.shape[1:]
    if layout == PER_HEAD:  # [q_h, k_h, v_h] for each head h
        return np.ascontiguousarray(w.reshape(heads, 3, -1, *rest).swapaxes(0, 1).reshape(w.shape))
    # GROUPED: for each KV group g, its H / Hkv query heads, then k_g and v_g
    groups = w.reshape(kv_heads, heads // kv_heads + 2, -1, *rest)  # (Hkv, H/Hkv + 2, Dh, ...)
    q = groups[:, :-2].reshape(-1, *rest)  # (H Dh, ...): group-major, as transformers flattens them
    k, v = groups[:, -2].reshape(-1, *rest), groups[:, -1].reshape(-1, *rest)  # (Hkv Dh, ...) each
    return np.concatenate([q, k, v])


# ---- GGUF: how llama.cpp's converter wrote this family ------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "token_embd": "transformer.word_embeddings",
    "output_norm": "transformer.ln_f",
    "output": "lm_head",
    # attn_norm is input_layernorm (Falcon-7B, Falcon2-11B) or ln_mlp (with attn_norm_2, the new architecture's
    # ln_attn): sanitize renames it in the second case
    "blk.{N}.attn_norm": "transformer.h.{N}.input_layernorm",
    "blk.{N}.attn_norm_2": "transformer.h.{N}.ln_attn",
    # FalconModel.modify_tensors wrote the groups' rows as q, k, v (its "jploski" layout)
    "blk.{N}.attn_qkv": "transformer.h.{N}.self_attention.query_key_value",
    "blk.{N}.attn_output": "transformer.h.{N}.self_attention.dense",
    "blk.{N}.ffn_up": "transformer.h.{N}.mlp.dense_h_to_4h",
    "blk.{N}.ffn_down": "transformer.h.{N}.mlp.dense_4h_to_h",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the rows were regrouped, not permuted for RoPE
GGUF_CONFIG_READS_TENSORS = True  # gguf_config takes the tensor shapes: the norm count is a tensor's presence


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's reading of a falcon file (src/models/falcon.cpp): always parallel attention and MLP, a second
    layer norm where the file has attn_norm_2, head_count_kv KV heads, LayerNorms with
    attention.layer_norm_epsilon, and no biases on the projections (llama.cpp reads none). The activation is
    not written: transformers' Falcon default, exact GELU."""
    kv_heads = config["num_key_value_heads"]
    if "blk.0.attn_norm_2.weight" in shapes:  # Falcon-40B / 180B
        layout = {"new_decoder_architecture": True, "num_ln_in_parallel_attn": 2}
    elif kv_heads == 1:  # Falcon-7B: multi-query, one shared norm
        layout = {"new_decoder_architecture": False, "multi_query": True}
    else:  # Falcon2-11B: grouped KV heads, one shared norm
        layout = {"new_decoder_architecture": True, "num_ln_in_parallel_attn": 1}
    return (
        config
        | layout
        | {
            "model_type": "falcon",
            "architectures": ["FalconForCausalLM"],
            "num_kv_heads": kv_heads,
            "parallel_attn": True,
            "bias": False,
            "layer_norm_epsilon": float(get("attention.layer_norm_epsilon")),
            "ffn_hidden_size": config["intermediate_size"],
            "activation": "gelu",
        }
    )
