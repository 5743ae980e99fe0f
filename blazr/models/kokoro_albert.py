"""Kokoro's PL-BERT: an ALBERT encoder (transformers' AlbertModel, last hidden state) over phoneme ids.

ALBERT factorises the embeddings (E < H, then one E -> H projection) and shares one layer's weights across
all num_hidden_layers passes (one layer group of one layer, as Kokoro's config has). Post-LN blocks as BERT's:
h = LN(h + dense(attention(h))), h = LN(h + ffn_output(gelu_tanh(ffn(h)))).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from blazr.models.base import Array
from blazr.models.kokoro_blocks import Linear
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm

_ACTS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


class AlbertLayer(Module):
    OPS = ("attention_dense", "act", "binary")

    def __init__(self, be, hidden: int, heads: int, ffn: int, act: str, eps: float):
        self.be, self.hidden, self.heads, self.act = be, hidden, heads, act
        self.query, self.key, self.value = (Linear(be, hidden, hidden) for _ in range(3))
        self.dense = Linear(be, hidden, hidden)
        self.attn_norm = LayerNorm(be, hidden, eps)
        self.ffn, self.ffn_output = Linear(be, hidden, ffn), Linear(be, ffn, hidden)
        self.out_norm = LayerNorm(be, hidden, eps)

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"attention.query.": self.query, "attention.key.": self.key}
        out |= {"attention.value.": self.value, "attention.dense.": self.dense}
        out |= {"attention.LayerNorm.": self.attn_norm, "ffn.": self.ffn, "ffn_output.": self.ffn_output}
        return out | {"full_layer_layer_norm.": self.out_norm}

    def __call__(self, h: Array, lens: Array) -> Array:
        """h (T, H), lens (1,) int32 -> (T, H)."""
        be, t, n = self.be, h.shape[0], self.heads
        dh = self.hidden // n
        q, k, v = (proj(h).reshape(t, n, dh) for proj in (self.query, self.key, self.value))  # (T, n, Dh)
        ctx = be.attention_dense(q, k, v, lens, lens, 1.0 / float(np.sqrt(dh)))  # (T, n, Dh)
        h = self.attn_norm(be.binary("add", h, self.dense(ctx.reshape(t, self.hidden))))
        f = self.ffn_output(be.act(self.ffn(h), self.act))  # (T, H)
        return self.out_norm(be.binary("add", h, f))


class Albert(Module):
    OPS = ("embed", "binary")

    def __init__(self, be, vocab: int, plbert: dict):
        self.be = be
        e, h = int(plbert.get("embedding_size", 128)), int(plbert["hidden_size"])
        self.vocab, self.e, self.positions = vocab, e, int(plbert.get("max_position_embeddings", 512))
        self.n_layers = int(plbert.get("num_hidden_layers", 12))
        act = _ACTS[plbert.get("hidden_act", "gelu_new")]
        eps = float(plbert.get("layer_norm_eps", 1e-12))
        self.word = self.position = self.token_type = None  # (V, E), (P, E), (2, E)
        self.emb_norm = LayerNorm(be, e, eps)
        self.mapping = Linear(be, e, h)
        heads, ffn = int(plbert.get("num_attention_heads", 12)), int(plbert.get("intermediate_size", 3072))
        self.layer = AlbertLayer(be, h, heads, ffn, act, eps)

    def declare(self) -> Iterator[Weight]:
        yield weight("word", "embeddings.word_embeddings.weight", (self.vocab, self.e))
        yield weight("position", "embeddings.position_embeddings.weight", (self.positions, self.e))
        yield weight("token_type", "embeddings.token_type_embeddings.weight", (2, self.e))

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"embeddings.LayerNorm.": self.emb_norm}
        out |= {"encoder.embedding_hidden_mapping_in.": self.mapping}
        return out | {"encoder.albert_layer_groups.0.albert_layers.0.": self.layer}

    def __call__(self, ids: np.ndarray) -> Array:
        """ids (T,) -> (T, H)."""
        be, t = self.be, len(ids)
        x = be.embed(self.word, be.upload(np.asarray(ids, dtype=np.int32)))  # (T, E)
        x = be.binary("add", x, be.embed(self.position, be.upload(np.arange(t, dtype=np.int32))))
        x = be.binary("add", x, be.embed(self.token_type, be.upload(np.zeros(1, dtype=np.int32))))
        h = self.mapping(self.emb_norm(x))  # (T, H)
        lens = be.upload(np.array([t], dtype=np.int32))
        for _ in range(self.n_layers):
            h = self.layer(h, lens)
        return h
