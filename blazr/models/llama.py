"""Llama-family dense decoders: Llama 1-3, Mistral and Qwen2 (HF model_type llama / mistral / qwen2).

Weights keep HF names and layout, except that q/k/v and gate/up rows are concatenated at load so a layer is
four matmuls. Every tensor op goes through the backend; nothing here branches on device or weight format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models.base import (
    HF_ACTIVATIONS,
    Array,
    BaseModelArgs,
    Step,
    check_weights,
    host_array,
    load_fused,
    load_tensor,
    trace,
    upload_batch,
    weight_uploader,
)
from blazr.models.batch import ForwardBatch
from blazr.models.rope import rope_parameters, rope_type

OPS_USED = ("embed", "matmul", "rms_norm", "rope", "kv_write", "attention", "glu", "binary")


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "llama"
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None  # (optional) default: num_attention_heads (no GQA)
    head_dim: int | None = None  # (optional) default: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None  # (optional) transformers v5 spelling of theta + scaling
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int = 2048
    vocab_size: int = 32000
    tie_word_embeddings: bool = False
    sliding_window: int | None = None  # Mistral; Qwen2 only with use_sliding_window
    use_sliding_window: bool = False  # Qwen2
    max_window_layers: int = 28  # Qwen2: layers from this index on use the window
    layer_types: list[str] | None = None  # (optional) "sliding_attention" / "full_attention" per layer
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"

    ALIASES = {"n_positions": "max_position_embeddings", "num_layers": "num_hidden_layers"}

    def __post_init__(self):
        self.num_key_value_heads = self.num_key_value_heads or self.num_attention_heads
        self.head_dim = self.head_dim or self.hidden_size // self.num_attention_heads
        if self.rope_parameters:
            self.rope_theta = self.rope_parameters.get("rope_theta", self.rope_theta)
            if self.rope_scaling is None and rope_type(self.rope_parameters) != "default":
                self.rope_scaling = self.rope_parameters
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.hidden_act not in HF_ACTIVATIONS:
            known = ", ".join(HF_ACTIVATIONS)
            raise UnsupportedError(f"hidden_act {self.hidden_act!r} is not supported; use one of {known}")

    @property
    def rot_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias or self.model_type == "qwen2"  # Qwen2 always has q/k/v biases

    @property
    def o_bias(self) -> bool:
        return self.attention_bias and self.model_type != "qwen2"

    def layer_window(self, layer: int) -> int:
        """Sliding-window length of one layer (0: full attention), as transformers decides it."""
        window = self.sliding_window
        if self.model_type == "llama" or (self.model_type == "qwen2" and not self.use_sliding_window):
            window = None
        if not window:
            return 0
        if self.layer_types is not None:
            return window if self.layer_types[layer] == "sliding_attention" else 0
        if self.model_type == "qwen2":
            return window if layer >= self.max_window_layers else 0
        return window


class Attention:
    """Self-attention over the paged KV cache; HF q_proj/k_proj/v_proj are one (Nq + 2 Nkv, D) matrix."""

    PROJS = ("q_proj", "k_proj", "v_proj")

    def __init__(self, args: ModelArgs, layer: int, backend, inv_freq: Array, attention_scaling: float):
        self.args, self.layer, self.be, self.inv_freq = args, layer, backend, inv_freq
        self.heads, self.kv_heads = args.num_attention_heads, args.num_key_value_heads
        self.head_dim = args.head_dim
        self.rot_dim = args.rot_dim if args.rot_dim < args.head_dim else None
        if attention_scaling != 1.0 and self.rot_dim is not None:
            raise UnsupportedError(
                "rope_scaling with an attention factor on partial-rotary heads is not supported"
            )
        # transformers scales cos and sin, so q.k of a fully rotated head grows by attention_scaling ** 2
        self.scale = attention_scaling**2 / math.sqrt(args.head_dim)
        self.window = args.layer_window(layer)
        self.qkv_proj = self.qkv_bias = self.o_proj = self.o_bias = None

    def shapes(self) -> dict[str, tuple[int, ...]]:
        a, dh = self.args, self.head_dim
        rows = {"q_proj": self.heads * dh, "k_proj": self.kv_heads * dh, "v_proj": self.kv_heads * dh}
        out = {f"{p}.weight": (n, a.hidden_size) for p, n in rows.items()}
        out |= {f"{p}.bias": (n,) for p, n in rows.items() if a.qkv_bias}
        out["o_proj.weight"] = (a.hidden_size, self.heads * dh)
        if a.o_bias:
            out["o_proj.bias"] = (a.hidden_size,)
        return out

    def load(self, get, upload) -> None:
        self.qkv_proj = load_fused(get, [f"{p}.weight" for p in self.PROJS], upload)  # (Nq + 2 Nkv, D)
        if self.args.qkv_bias:
            self.qkv_bias = load_fused(get, [f"{p}.bias" for p in self.PROJS], upload)  # (Nq + 2 Nkv,)
        self.o_proj = load_tensor(get, "o_proj.weight", upload)  # (D, Nq)
        if self.args.o_bias:
            self.o_bias = load_tensor(get, "o_proj.bias", upload)  # (D,)

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i, h, hkv = self.be, self.layer, self.heads, self.kv_heads
        qkv = be.matmul(x, self.qkv_proj)  # (T, Nq + 2 Nkv)
        if self.qkv_bias is not None:
            qkv = be.binary("add", qkv, self.qkv_bias)
        qkv = qkv.reshape(step.num_tokens, h + 2 * hkv, self.head_dim)  # (T, H + 2 Hkv, Dh)
        trace("qkv", i, qkv)
        # q and k heads are adjacent, so one rope call rotates both: (T, H + Hkv, Dh)
        qk = be.rope(qkv[:, : h + hkv], step.positions, self.inv_freq, "neox", self.rot_dim)
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + hkv :]  # (T, H, Dh), (T, Hkv, Dh), (T, Hkv, Dh)
        trace("qk_rope", i, qk)
        be.kv_write(k_cache, v_cache, k, v, step.slots)
        tables, ctx, q_lens, bs = step.block_tables, step.ctx_lens, step.q_lens, step.block_size
        o = be.attention(q, k_cache, v_cache, tables, ctx, q_lens, bs, self.scale, self.window)  # (T, H, Dh)
        trace("attn", i, o)
        out = be.matmul(o.reshape(step.num_tokens, h * self.head_dim), self.o_proj)  # (T, D)
        return out if self.o_bias is None else be.binary("add", out, self.o_bias)


class MLP:
    """SwiGLU feed-forward; HF gate_proj/up_proj are one (2F, D) matrix."""

    def __init__(self, args: ModelArgs, layer: int, backend):
        self.args, self.layer, self.be = args, layer, backend
        self.ffn, self.act = args.intermediate_size, HF_ACTIVATIONS[args.hidden_act]
        self.gate_up_proj = self.gate_up_bias = self.down_proj = self.down_bias = None

    def shapes(self) -> dict[str, tuple[int, ...]]:
        d, f = self.args.hidden_size, self.ffn
        out = {"gate_proj.weight": (f, d), "up_proj.weight": (f, d), "down_proj.weight": (d, f)}
        if self.args.mlp_bias:
            out |= {"gate_proj.bias": (f,), "up_proj.bias": (f,), "down_proj.bias": (d,)}
        return out

    def load(self, get, upload) -> None:
        self.gate_up_proj = load_fused(get, ["gate_proj.weight", "up_proj.weight"], upload)  # (2F, D)
        self.down_proj = load_tensor(get, "down_proj.weight", upload)  # (D, F)
        if self.args.mlp_bias:
            self.gate_up_bias = load_fused(get, ["gate_proj.bias", "up_proj.bias"], upload)  # (2F,)
            self.down_bias = load_tensor(get, "down_proj.bias", upload)  # (D,)

    def __call__(self, x: Array) -> Array:
        be, f = self.be, self.ffn
        gate_up = be.matmul(x, self.gate_up_proj)  # (T, 2F)
        if self.gate_up_bias is not None:
            gate_up = be.binary("add", gate_up, self.gate_up_bias)
        trace("ffn_gate_up", self.layer, gate_up)
        h = be.glu(gate_up[:, :f], gate_up[:, f:], self.act)  # (T, F)
        trace("ffn_act", self.layer, h)
        out = be.matmul(h, self.down_proj)  # (T, D)
        return out if self.down_bias is None else be.binary("add", out, self.down_bias)


class TransformerBlock:
    def __init__(self, args: ModelArgs, layer: int, backend, inv_freq: Array, attention_scaling: float):
        self.args, self.layer, self.be = args, layer, backend
        self.self_attn = Attention(args, layer, backend, inv_freq, attention_scaling)
        self.mlp = MLP(args, layer, backend)
        self.input_layernorm = self.post_attention_layernorm = None

    def shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.args.hidden_size
        out = {"input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,)}
        out |= {f"self_attn.{k}": s for k, s in self.self_attn.shapes().items()}
        return out | {f"mlp.{k}": s for k, s in self.mlp.shapes().items()}

    def load(self, get, upload) -> None:
        self.input_layernorm = load_tensor(get, "input_layernorm.weight", upload)  # (D,)
        self.post_attention_layernorm = load_tensor(get, "post_attention_layernorm.weight", upload)  # (D,)
        self.self_attn.load(lambda n: get("self_attn." + n), upload)
        self.mlp.load(lambda n: get("mlp." + n), upload)

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i, eps = self.be, self.layer, self.args.rms_norm_eps
        h = be.rms_norm(x, self.input_layernorm, eps)  # (T, D)
        trace("attn_norm", i, h)
        x = be.binary("add", x, self.self_attn(h, step, k_cache, v_cache))  # (T, D)
        trace("ffn_inp", i, x)
        h = be.rms_norm(x, self.post_attention_layernorm, eps)  # (T, D)
        trace("ffn_norm", i, h)
        x = be.binary("add", x, self.mlp(h))  # (T, D)
        trace("l_out", i, x)
        return x


class Model:
    """A Llama-family causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        self.args, self.be, self.dtype = args, backend, dtype or "f32"
        inv_freq, attention_scaling = rope_parameters(
            args.rot_dim, args.rope_theta, args.rope_scaling, args.max_position_embeddings
        )
        self.inv_freq = backend.upload(inv_freq, "f32")  # (R/2,) kept in f32 whatever the compute dtype
        self.layers = [
            TransformerBlock(args, i, backend, self.inv_freq, attention_scaling)
            for i in range(args.num_hidden_layers)
        ]
        self.embed_tokens = self.norm = self.lm_head = None

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        """Every (op, dtype, weight format) this model calls; checked against backend.supports() at load."""
        return [(op, self.dtype, None) for op in OPS_USED]

    def make_cache(self, num_blocks: int, block_size: int) -> list[tuple[Array, Array]]:
        """Per layer (k_cache, v_cache), each (num_blocks * block_size, Hkv, Dh)."""
        shape = (num_blocks * block_size, self.args.num_key_value_heads, self.args.head_dim)
        return [(self.be.empty(shape, self.dtype), self.be.empty(shape, self.dtype)) for _ in self.layers]

    def __call__(self, batch: ForwardBatch, cache: list[tuple[Array, Array]]) -> Array:
        x, rows = self._forward(batch, cache)  # (T, D)
        if rows is not None:
            x = self.be.embed(x, rows)  # (R, D): norm and lm_head only on the rows whose logits are wanted
        h = self.be.rms_norm(x, self.norm, self.args.rms_norm_eps)  # (R, D)
        trace("norm", -1, h)
        logits = self.be.matmul(h, self.lm_head)  # (R, V)
        trace("logits", -1, logits)
        return logits

    def hidden(self, batch: ForwardBatch, cache: list[tuple[Array, Array]]) -> Array:
        """Final-norm hidden states (T, D) of every new token (for embeddings)."""
        x, _ = self._forward(batch, cache)  # (T, D)
        h = self.be.rms_norm(x, self.norm, self.args.rms_norm_eps)  # (T, D)
        trace("norm", -1, h)
        return h

    def _forward(self, batch: ForwardBatch, cache: list[tuple[Array, Array]]) -> tuple[Array, Array | None]:
        step, rows = upload_batch(self.be, batch)
        x = self.be.embed(self.embed_tokens, self.be.upload(batch.token_ids))  # (T, D)
        trace("embed", -1, x)
        for layer, (k_cache, v_cache) in zip(self.layers, cache, strict=True):
            x = layer(x, step, k_cache, v_cache)
        return x, rows

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """HF name -> shape of every tensor this model loads (after sanitize)."""
        a = self.args
        out = {"model.embed_tokens.weight": (a.vocab_size, a.hidden_size)}
        out["model.norm.weight"] = (a.hidden_size,)
        if not a.tie_word_embeddings:
            out["lm_head.weight"] = (a.vocab_size, a.hidden_size)
        for i, layer in enumerate(self.layers):
            out |= {f"model.layers.{i}.{k}": s for k, s in layer.shapes().items()}
        return out

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Checkpoint quirks, before the strict load."""
        # precomputed rotary tables in old checkpoints: we build our own from the config
        weights = {k: v for k, v in weights.items() if not k.endswith("rotary_emb.inv_freq")}
        if self.args.tie_word_embeddings:
            weights.pop("lm_head.weight", None)  # some tied checkpoints still save a copy of the embeddings
        expected = self.weight_shapes()
        for name in [n for n in weights if n.endswith("_proj.bias") and n not in expected]:
            # GPTQ-for-LLaMa wrote an all-zero bias for every quantized linear layer: harmless, so dropped;
            # a non-zero one is left for the strict check to report
            if not host_array(weights[name]).any():
                del weights[name]
        return weights

    def load_weights(self, weights: dict[str, Any], source=None) -> None:
        """Strict: every tensor of weight_shapes() with its shape and nothing else, else CheckpointError."""
        check_weights(weights, self.weight_shapes(), source)

        upload = weight_uploader(self.be, self.dtype)  # quantized weights stay packed where supported
        self.embed_tokens = load_tensor(weights.get, "model.embed_tokens.weight", upload)  # (V, D)
        self.norm = load_tensor(weights.get, "model.norm.weight", upload)  # (D,)
        tied = self.args.tie_word_embeddings
        self.lm_head = (
            self.embed_tokens if tied else load_tensor(weights.get, "lm_head.weight", upload)
        )  # (V, D)
        for i, layer in enumerate(self.layers):
            layer.load(lambda n, p=f"model.layers.{i}.": weights[p + n], upload)
