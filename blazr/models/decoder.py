"""DecoderLM: the causal-LM skeleton every decoder family shares (embeddings -> blocks -> norm -> head).

A family file subclasses DecoderLM and says only what differs: its ModelArgs, the block of each layer
(`make_block`), and checkpoint quirks (`sanitize`). Blocks are choices, not flags: PreNormBlock (Llama and
most families), SandwichBlock (Gemma 2/3: norms before and after attention and MLP), PostNormBlock (OLMo 2:
norms after attention and MLP only) and ParallelBlock (Phi-2, GPT-NeoX, Falcon, Command-R: attention and MLP
read the same input and both add to the residual). Families whose checkpoints name the parts differently
(GPT-NeoX's "attention.", Falcon's "self_attention.") pass their names; the model-level prefixes are class
attributes (EMBED, LAYERS, NORM, HEAD).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blazr.models.base import Array, Step, check_weights, host_array, trace, upload_batch, weight_uploader
from blazr.models.batch import ForwardBatch
from blazr.models.decoder_packed import PackedDecoder
from blazr.models.layers.embedding import Embedding
from blazr.models.layers.module import Module
from blazr.models.layers.sandwich_block import SandwichBlock  # noqa: F401 (Gemma 2/3 import it from here)

KVCache = list[tuple[Array, Array]]  # per layer (k_cache, v_cache), each (S, Hkv, Dh)


class PreNormBlock(Module):
    """x + attn(norm(x)), then x + mlp(norm(x)): HF input_layernorm / post_attention_layernorm."""

    OPS = ("binary",)

    NAMES = ("input_layernorm.", "self_attn.", "post_attention_layernorm.", "mlp.")

    def __init__(
        self,
        layer: int,
        attn: Module,
        mlp: Module,
        input_norm: Module,
        post_attention_norm: Module,
        names: tuple[str, str, str, str] | None = None,
        residual_scale: Array | None = None,
    ):
        self.layer, self.self_attn, self.mlp = layer, attn, mlp
        self.input_layernorm, self.post_attention_layernorm = input_norm, post_attention_norm
        self.names = names or self.NAMES  # checkpoint prefixes of (input norm, attention, MLP norm, MLP)
        self.residual_scale = residual_scale  # (D,) multiplies attention and MLP outputs (Granite)

    def children(self) -> dict[str, Module]:
        parts = (self.input_layernorm, self.self_attn, self.post_attention_layernorm, self.mlp)
        return dict(zip(self.names, parts, strict=True))

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.input_layernorm(x)  # (T, D)
        trace("attn_norm", i, h)
        x = be.binary("add", x, self._scaled(self.self_attn(h, step, k_cache, v_cache)))  # (T, D)
        trace("ffn_inp", i, x)
        h = self.post_attention_layernorm(x)  # (T, D)
        trace("ffn_norm", i, h)
        x = be.binary("add", x, self._scaled(self.mlp(h)))  # (T, D)
        trace("l_out", i, x)
        return x

    def _scaled(self, h: Array) -> Array:
        return h if self.residual_scale is None else self.self_attn.be.binary("mul", h, self.residual_scale)


class PostNormBlock(Module):
    """x + norm(attn(x)), then x + norm(mlp(x)): OLMo 2 (HF post_attention_layernorm /
    post_feedforward_layernorm, no norm before either)."""

    OPS = ("binary",)

    def __init__(self, layer: int, attn: Module, mlp: Module, norm):
        self.layer, self.self_attn, self.mlp = layer, attn, mlp
        self.post_attention_layernorm, self.post_feedforward_layernorm = norm(), norm()

    def children(self) -> dict[str, Module]:
        return {
            "self_attn.": self.self_attn,
            "post_attention_layernorm.": self.post_attention_layernorm,
            "mlp.": self.mlp,
            "post_feedforward_layernorm.": self.post_feedforward_layernorm,
        }

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.post_attention_layernorm(self.self_attn(x, step, k_cache, v_cache))  # (T, D)
        trace("attn_post_norm", i, h)
        x = be.binary("add", x, h)  # (T, D)
        trace("ffn_inp", i, x)
        h = self.post_feedforward_layernorm(self.mlp(x))  # (T, D)
        trace("ffn_post_norm", i, h)
        x = be.binary("add", x, h)  # (T, D)
        trace("l_out", i, x)
        return x


class ParallelBlock(Module):
    """x + attn(norm_a(x)) + mlp(norm_m(x)): attention and MLP side by side on the same residual.

    One shared norm (Phi-2, Command-R, Falcon-7B: mlp_norm None) or two (GPT-NeoX's input_layernorm and
    post_attention_layernorm, Falcon-40B's ln_attn and ln_mlp). `names` are the checkpoint prefixes of
    (attention norm, attention, MLP norm, MLP); the MLP norm's is ignored when there is none."""

    OPS = ("binary",)

    def __init__(
        self,
        layer: int,
        attn: Module,
        mlp: Module,
        attn_norm: Module,
        mlp_norm: Module | None = None,
        names: tuple[str, str, str, str] = (
            "input_layernorm.",
            "self_attn.",
            "post_attention_layernorm.",
            "mlp.",
        ),
    ):
        self.layer, self.self_attn, self.mlp = layer, attn, mlp
        self.attn_norm, self.mlp_norm, self.names = attn_norm, mlp_norm, names

    def children(self) -> dict[str, Module]:
        attn_norm, attn, mlp_norm, mlp = self.names
        out = {attn_norm: self.attn_norm, attn: self.self_attn, mlp: self.mlp}
        return out if self.mlp_norm is None else out | {mlp_norm: self.mlp_norm}

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.attn_norm(x)  # (T, D)
        trace("attn_norm", i, h)
        attn = self.self_attn(h, step, k_cache, v_cache)  # (T, D)
        if self.mlp_norm is not None:
            h = self.mlp_norm(x)  # (T, D)
            trace("ffn_norm", i, h)
        mlp = self.mlp(h)  # (T, D)
        # (x + attn) + mlp, in the order transformers adds them
        x = be.binary("add", be.binary("add", x, attn), mlp)  # (T, D)
        trace("l_out", i, x)
        return x


class DecoderLM(PackedDecoder, Module):
    """A causal LM on one backend: `model(batch, cache)` -> logits (R, V) of the batch's logits rows.

    Subclasses set ModelArgs-derived sizes through `args` (hidden_size, vocab_size, num_hidden_layers,
    num_key_value_heads, head_dim, rms_norm_eps, tie_word_embeddings) and implement make_block / make_norm."""

    OPS = ("embed", "matmul", "binary")  # the head's matmul and bias, row selection; layers add their own

    # checkpoint prefixes of the embeddings, of layer N, of the final norm and of the LM head
    EMBED, LAYERS, NORM, HEAD = "model.embed_tokens.", "model.layers.{}.", "model.norm.", "lm_head."
    HEAD_BIAS = False  # the LM head has a bias (Phi-2)

    embed_scale: Array | None = None  # (D,) multiplies the embeddings (Gemma: sqrt(D)); set by a family
    logit_scale: Array | None = None  # (V,) multiplies the logits (Command-R, Granite); set by a family
    final_softcap: float = 0.0  # logits -> c * tanh(logits / c) (Gemma 2); set by a family
    _softcap_factors: tuple[Array, Array] | None = None
    lora_state: Any = None  # blazr.models.lora.LoraState once an adapter is bound
    # a pipeline stage (blazr/models/decoder_stage.py) holds layers layer_offset.. and, if first, the
    # embeddings, if last, the final norm and head: the whole model is one stage holding everything
    layer_offset: int = 0
    first_stage: bool = True
    last_stage: bool = True
    # the KV cache's dtype (None: the model's); blazr.engine.kv_dtype sets it where KV_DTYPE_CHOICE says
    # make_cache honours it (a family with a cache of another shape sets KV_DTYPE_CHOICE False)
    kv_dtype: str | None = None
    KV_DTYPE_CHOICE = True

    def __init__(self, args, backend, dtype: str | None = None):
        self.args, self.be, self.dtype = args, backend, dtype or "f32"
        self.embed_tokens = Embedding(backend, args.vocab_size, args.hidden_size)
        self.layers = [self.make_block(i) for i in range(args.num_hidden_layers)]
        self.norm = self.make_norm(args.hidden_size)
        self.lm_head = (
            None
            if args.tie_word_embeddings
            else Embedding(backend, args.vocab_size, args.hidden_size, self.HEAD_BIAS)
        )

    def scale_logits(self, factor: float) -> None:
        """Multiply every logit by `factor` (a family's logit scale; 1 leaves them alone)."""
        if factor != 1.0:
            self.logit_scale = self.be.upload(np.full(self.args.vocab_size, factor, np.float32), self.dtype)

    # ---- what a family provides ----------------------------------------------------------------------------

    def make_block(self, layer: int) -> Module:
        raise NotImplementedError

    def make_norm(self, dim: int) -> Module:
        raise NotImplementedError

    # ---- weights -------------------------------------------------------------------------------------------

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {}
        if self.first_stage or (self.last_stage and self.lm_head is None):  # the tied head reads them
            out[self.EMBED] = self.embed_tokens
        if self.last_stage:
            out[self.NORM] = self.norm
        out |= {self.LAYERS.format(self.layer_offset + i): layer for i, layer in enumerate(self.layers)}
        if self.last_stage and self.lm_head is not None:
            out[self.HEAD] = self.lm_head
        return out

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        """Every (op, dtype, weight format) this model calls; checked against backend.supports() at load."""
        ops = self.ops() | ({"act"} if self.final_softcap else set())  # act: tanh of the logit soft-cap
        return [(op, self.dtype, None) for op in sorted(ops)]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Checkpoint quirks, before the strict load; a family extends this with its own."""
        # precomputed rotary tables in old checkpoints: we build our own from the config
        weights = {k: v for k, v in weights.items() if not k.endswith("rotary_emb.inv_freq")}
        weights = self.bare_names(weights)  # a bare decoder's names (embedders); no head when embedding
        if self.args.tie_word_embeddings:
            weights.pop(
                self.HEAD + "weight", None
            )  # some tied checkpoints still save a copy of the embeddings
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
        self.load(weights.__getitem__, weight_uploader(self.be, self.dtype))  # packed where supported

    # ---- running -------------------------------------------------------------------------------------------

    def make_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """Per layer (k_cache, v_cache), each (num_blocks * block_size, Hkv, Dh), in kv_dtype (None: the
        model's dtype; blazr.engine.kv_dtype)."""
        shape = (num_blocks * block_size, self.args.num_key_value_heads, self.args.head_dim)
        dtype = self.kv_dtype or self.dtype
        return [(self.be.empty(shape, dtype), self.be.empty(shape, dtype)) for _ in self.layers]

    def __call__(self, batch: ForwardBatch, cache: KVCache) -> Array:
        x, rows = self._forward(batch, cache)  # (T, D)
        return self._logits(x, rows)

    def stage(self, batch: ForwardBatch, cache: KVCache, hidden: Array | None) -> Array:
        """A pipeline stage's part: the hidden states (T, D) after its layers, from the embeddings (the first
        stage, `hidden` None) or from the previous stage's `hidden`; the last stage returns the logits (R, V)."""
        x, rows = self._forward(batch, cache, hidden)  # (T, D)
        return self._logits(x, rows) if self.last_stage else x

    def _logits(self, x: Array, rows: Array | None) -> Array:
        """Logits (R, V) of the logits rows of the last layer's output x (T, D)."""
        if rows is not None:
            x = self.be.embed(x, rows)  # (R, D): norm and lm_head only on the rows whose logits are wanted
        h = self.norm(x)  # (R, D)
        trace("norm", -1, h)
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        logits = self.be.matmul(h, head.weight)  # (R, V)
        if head.bias is not None:
            logits = self.be.binary("add", logits, head.bias)
        if self.logit_scale is not None:
            logits = self.be.binary("mul", logits, self.logit_scale)
        if self.final_softcap:
            logits = self._softcap(logits, self.final_softcap)
        trace("logits", -1, logits)
        return logits

    def _softcap(self, x: Array, cap: float) -> Array:
        """cap * tanh(x / cap), elementwise: x (R, V) -> (R, V)."""
        be = self.be
        if self._softcap_factors is None:  # ((V,) 1 / cap, (V,) cap) on the device, made once
            n = x.shape[-1]
            self._softcap_factors = tuple(
                be.upload(np.full(n, f, np.float32), self.dtype) for f in (1 / cap, cap)
            )
        inv, mul = self._softcap_factors
        return be.binary("mul", be.act(be.binary("mul", x, inv), "tanh"), mul)

    def hidden(self, batch: ForwardBatch, cache: KVCache) -> Array:
        """Final-norm hidden states (T, D) of every new token (for embeddings)."""
        x, _ = self._forward(batch, cache)  # (T, D)
        h = self.norm(x)  # (T, D)
        trace("norm", -1, h)
        return h

    def _forward(
        self, batch: ForwardBatch, cache: KVCache, hidden: Array | None = None
    ) -> tuple[Array, Array | None]:
        step, rows = upload_batch(self.be, batch)
        if self.lora_state is not None:
            self.lora_state.begin(batch.adapters, batch.q_lens)
        if hidden is not None:  # a later pipeline stage: the previous stage's output
            x = hidden  # (T, D)
        else:
            x = self.be.embed(self.embed_tokens.weight, self.be.upload(batch.token_ids))  # (T, D)
            if self.embed_scale is not None:
                x = self.be.binary("mul", x, self.embed_scale)  # (T, D)
            trace("embed", -1, x)
        for layer, (k_cache, v_cache) in zip(self.layers, cache, strict=True):
            x = layer(x, step, k_cache, v_cache)
        return x, rows
