"""DecoderLM: the causal-LM skeleton every decoder family shares (embeddings -> blocks -> norm -> head).

A family file subclasses DecoderLM and says only what differs: its ModelArgs, the block of each layer
(`make_block`), and checkpoint quirks (`sanitize`). Blocks are choices, not flags: PreNormBlock (Llama and
most families) and SandwichBlock (Gemma 2/3: norms before and after attention and MLP); a parallel-residual
block sits next to them when a family needs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from blazr.models.base import Array, Step, check_weights, host_array, trace, upload_batch, weight_uploader
from blazr.models.batch import ForwardBatch
from blazr.models.layers.module import Module, Weight, weight

KVCache = list[tuple[Array, Array]]  # per layer (k_cache, v_cache), each (S, Hkv, Dh)


class PreNormBlock(Module):
    """x + attn(norm(x)), then x + mlp(norm(x)): HF input_layernorm / post_attention_layernorm."""

    def __init__(
        self, layer: int, attn: Module, mlp: Module, input_norm: Module, post_attention_norm: Module
    ):
        self.layer, self.self_attn, self.mlp = layer, attn, mlp
        self.input_layernorm, self.post_attention_layernorm = input_norm, post_attention_norm

    def children(self) -> dict[str, Module]:
        return {
            "input_layernorm.": self.input_layernorm,
            "self_attn.": self.self_attn,
            "post_attention_layernorm.": self.post_attention_layernorm,
            "mlp.": self.mlp,
        }

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.input_layernorm(x)  # (T, D)
        trace("attn_norm", i, h)
        x = be.binary("add", x, self.self_attn(h, step, k_cache, v_cache))  # (T, D)
        trace("ffn_inp", i, x)
        h = self.post_attention_layernorm(x)  # (T, D)
        trace("ffn_norm", i, h)
        x = be.binary("add", x, self.mlp(h))  # (T, D)
        trace("l_out", i, x)
        return x


class SandwichBlock(Module):
    """x + post_norm(attn(norm(x))), then x + post_norm(mlp(pre_norm(x))): Gemma 2 and 3."""

    def __init__(self, layer: int, attn: Module, mlp: Module, norm):
        self.layer, self.self_attn, self.mlp = layer, attn, mlp
        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()

    def children(self) -> dict[str, Module]:
        return {
            "input_layernorm.": self.input_layernorm,
            "self_attn.": self.self_attn,
            "post_attention_layernorm.": self.post_attention_layernorm,
            "pre_feedforward_layernorm.": self.pre_feedforward_layernorm,
            "mlp.": self.mlp,
            "post_feedforward_layernorm.": self.post_feedforward_layernorm,
        }

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.input_layernorm(x)  # (T, D)
        trace("attn_norm", i, h)
        h = self.post_attention_layernorm(self.self_attn(h, step, k_cache, v_cache))  # (T, D)
        trace("attn_post_norm", i, h)
        x = be.binary("add", x, h)  # (T, D)
        trace("ffn_inp", i, x)
        h = self.pre_feedforward_layernorm(x)  # (T, D)
        trace("ffn_norm", i, h)
        h = self.post_feedforward_layernorm(self.mlp(h))  # (T, D)
        trace("ffn_post_norm", i, h)
        x = be.binary("add", x, h)  # (T, D)
        trace("l_out", i, x)
        return x


class Embedding(Module):
    def __init__(self, backend, vocab: int, dim: int):
        self.be, self.vocab, self.dim = backend, vocab, dim
        self.weight = None  # (V, D)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.vocab, self.dim))


class DecoderLM(Module):
    """A causal LM on one backend: `model(batch, cache)` -> logits (R, V) of the batch's logits rows.

    Subclasses set ModelArgs-derived sizes through `args` (hidden_size, vocab_size, num_hidden_layers,
    num_key_value_heads, head_dim, rms_norm_eps, tie_word_embeddings) and implement make_block / make_norm."""

    OPS: tuple[str, ...] = ("embed", "matmul", "rms_norm", "rope", "kv_write", "attention", "glu", "binary")

    embed_scale: Array | None = None  # (D,) multiplies the embeddings (Gemma: sqrt(D)); set by a family

    def __init__(self, args, backend, dtype: str | None = None):
        self.args, self.be, self.dtype = args, backend, dtype or "f32"
        self.embed_tokens = Embedding(backend, args.vocab_size, args.hidden_size)
        self.layers = [self.make_block(i) for i in range(args.num_hidden_layers)]
        self.norm = self.make_norm(args.hidden_size)
        self.lm_head = (
            None if args.tie_word_embeddings else Embedding(backend, args.vocab_size, args.hidden_size)
        )

    # ---- what a family provides ----------------------------------------------------------------------------

    def make_block(self, layer: int) -> Module:
        raise NotImplementedError

    def make_norm(self, dim: int) -> Module:
        raise NotImplementedError

    # ---- weights -------------------------------------------------------------------------------------------

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"model.embed_tokens.": self.embed_tokens, "model.norm.": self.norm}
        out |= {f"model.layers.{i}.": layer for i, layer in enumerate(self.layers)}
        return out if self.lm_head is None else out | {"lm_head.": self.lm_head}

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        """Every (op, dtype, weight format) this model calls; checked against backend.supports() at load."""
        return [(op, self.dtype, None) for op in self.OPS]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Checkpoint quirks, before the strict load; a family extends this with its own."""
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
        self.load(weights.__getitem__, weight_uploader(self.be, self.dtype))  # packed where supported

    # ---- running -------------------------------------------------------------------------------------------

    def make_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """Per layer (k_cache, v_cache), each (num_blocks * block_size, Hkv, Dh)."""
        shape = (num_blocks * block_size, self.args.num_key_value_heads, self.args.head_dim)
        return [(self.be.empty(shape, self.dtype), self.be.empty(shape, self.dtype)) for _ in self.layers]

    def __call__(self, batch: ForwardBatch, cache: KVCache) -> Array:
        x, rows = self._forward(batch, cache)  # (T, D)
        if rows is not None:
            x = self.be.embed(x, rows)  # (R, D): norm and lm_head only on the rows whose logits are wanted
        h = self.norm(x)  # (R, D)
        trace("norm", -1, h)
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        logits = self.be.matmul(h, head.weight)  # (R, V)
        trace("logits", -1, logits)
        return logits

    def hidden(self, batch: ForwardBatch, cache: KVCache) -> Array:
        """Final-norm hidden states (T, D) of every new token (for embeddings)."""
        x, _ = self._forward(batch, cache)  # (T, D)
        h = self.norm(x)  # (T, D)
        trace("norm", -1, h)
        return h

    def _forward(self, batch: ForwardBatch, cache: KVCache) -> tuple[Array, Array | None]:
        step, rows = upload_batch(self.be, batch)
        x = self.be.embed(self.embed_tokens.weight, self.be.upload(batch.token_ids))  # (T, D)
        if self.embed_scale is not None:
            x = self.be.binary("mul", x, self.embed_scale)  # (T, D)
        trace("embed", -1, x)
        for layer, (k_cache, v_cache) in zip(self.layers, cache, strict=True):
            x = layer(x, step, k_cache, v_cache)
        return x, rows
