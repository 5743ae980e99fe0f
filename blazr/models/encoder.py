"""EncoderModel: the bidirectional-encoder skeleton (BERT and kin): embeddings -> blocks -> hidden states.

An encoder reads whole sequences at once, so it keeps no KV cache: a forward pass takes B token sequences
packed back to back (no padding; `seq_lens` says where each ends) and attention stays inside each
(attention_dense). What the hidden states become (pooled sentence vectors, reranker scores) is the embed
task's business (blazr.tasks.embed); a model with a classification head also offers `classify`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from blazr.models.base import Array, check_weights, trace, weight_uploader
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm


def classifier_task(classifiers: tuple[str, ...]):
    """A family's `task(config)` for blazr.models.model_task: a sequence classifier (architectures[0] in
    `classifiers`) reranks; anything else embeds."""

    def task(config: dict[str, Any]) -> str:
        return "rerank" if (config.get("architectures") or [""])[0] in classifiers else "embed"

    return task


class AbsoluteEmbeddings(Module):
    """word + learned absolute position (+ token type) embeddings, then a LayerNorm (BERT, RoBERTa)."""

    OPS = ("embed", "binary", "layer_norm")

    def __init__(self, backend, vocab: int, dim: int, positions: int, types: int, eps: float):
        self.be, self.vocab, self.dim, self.positions, self.types = backend, vocab, dim, positions, types
        self.LayerNorm = LayerNorm(backend, dim, eps)
        self.word = self.position = self.token_type = None  # (V, D), (P, D), (types, D) or None

    def declare(self) -> Iterator[Weight]:
        yield weight("word", "word_embeddings.weight", (self.vocab, self.dim))
        yield weight("position", "position_embeddings.weight", (self.positions, self.dim))
        if self.types:
            yield weight("token_type", "token_type_embeddings.weight", (self.types, self.dim))

    def children(self) -> dict[str, Module]:
        return {"LayerNorm.": self.LayerNorm}

    def __call__(self, ids: Array, positions: Array, type_ids: Array | None) -> Array:
        be = self.be
        x = be.binary("add", be.embed(self.word, ids), be.embed(self.position, positions))  # (T, D)
        if self.token_type is not None and type_ids is not None:
            x = be.binary("add", x, be.embed(self.token_type, type_ids))
        return self.LayerNorm(x)  # (T, D)


class TypedEmbeddings(Module):
    """word (+ token type) embeddings, then a LayerNorm: the rotary encoders (NomicBERT, GTE), which have no
    position table. `tables` and `norm` are the checkpoint prefixes of the embedding tables and of the LayerNorm
    relative to the model's EMBED (NomicBERT's LayerNorm, emb_ln, sits beside "embeddings.", GTE's inside)."""

    OPS = ("embed", "binary", "layer_norm")

    def __init__(self, backend, vocab: int, dim: int, types: int, eps: float, tables: str, norm: str):
        self.be, self.vocab, self.dim, self.types = backend, vocab, dim, types
        self.tables, self.norm_name = tables, norm
        self.norm = LayerNorm(backend, dim, eps)
        self.word = self.token_type = None  # (V, D), (types, D) or None

    def declare(self) -> Iterator[Weight]:
        yield weight("word", f"{self.tables}word_embeddings.weight", (self.vocab, self.dim))
        if self.types:
            yield weight("token_type", f"{self.tables}token_type_embeddings.weight", (self.types, self.dim))

    def children(self) -> dict[str, Module]:
        return {self.norm_name: self.norm}

    def __call__(self, ids: Array, positions: Array, type_ids: Array | None) -> Array:
        """positions are the attention's business (rotary), not read here."""
        be = self.be
        x = be.embed(self.word, ids)  # (T, D)
        if self.token_type is not None and type_ids is not None:
            x = be.binary("add", x, be.embed(self.token_type, type_ids))
        return self.norm(x)  # (T, D)


def sequence_positions(seq_lens: np.ndarray) -> np.ndarray:
    """(T,) int32 position of each token within its sequence, for sequences of seq_lens (B,) back to back."""
    starts = np.repeat(np.cumsum(seq_lens) - seq_lens, seq_lens)  # (T,) each token's sequence start
    return (np.arange(int(np.sum(seq_lens))) - starts).astype(np.int32)


class PostNormEncoderBlock(Module):
    """x = norm(x + attn(x)), then x = norm(x + mlp(x)): the original Transformer's block (BERT, RoBERTa,
    MPNet). `names` are the checkpoint prefixes of (attention, its norm, MLP, its norm)."""

    OPS = ("binary",)

    def __init__(
        self,
        layer: int,
        attn: Module,
        attn_norm: Module,
        mlp: Module,
        mlp_norm: Module,
        names: tuple[str, ...],
    ):
        self.layer, self.attn, self.attn_norm, self.mlp, self.mlp_norm = layer, attn, attn_norm, mlp, mlp_norm
        self.names = names

    def children(self) -> dict[str, Module]:
        return dict(zip(self.names, (self.attn, self.attn_norm, self.mlp, self.mlp_norm), strict=True))

    def __call__(self, x: Array, seq_lens: Array, **attn_args) -> Array:
        """attn_args go to the attention (MPNet's rel_bias)."""
        be = self.attn.be
        x = self.attn_norm(be.binary("add", x, self.attn(x, seq_lens, **attn_args)))  # (T, D)
        trace("attn_out", self.layer, x)
        x = self.mlp_norm(be.binary("add", x, self.mlp(x)))  # (T, D)
        trace("l_out", self.layer, x)
        return x


class EncoderModel(Module):
    """embeddings -> blocks, over a packed batch. A family sets the prefixes, builds `embeddings` and
    `layers` in __init__, and may add a classification head (`head`, used by `classify`)."""

    EMBED, LAYERS = "embeddings.", "encoder.layer.{}."
    POSITION_OFFSET = 0  # the first token's position id (RoBERTa's: padding_idx + 1)

    embeddings: Module
    layers: list[Module]
    head: Module | None = None  # a sequence-classification head (rerankers); None for embedders

    def __init__(self, args, backend, dtype: str | None = None):
        self.args, self.be, self.dtype = args, backend, dtype or "f32"

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {self.EMBED: self.embeddings}
        out |= {self.LAYERS.format(i): layer for i, layer in enumerate(self.layers)}
        return out if self.head is None else out | {"": self.head}

    @property
    def hidden_size(self) -> int:
        return self.args.hidden_size

    @property
    def max_positions(self) -> int:
        """The longest sequence the position table covers."""
        return self.args.max_position_embeddings - self.POSITION_OFFSET

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        return [(op, self.dtype, None) for op in sorted(self.ops())]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        return weights

    def load_weights(self, weights: dict[str, Any], source=None) -> None:
        """Strict: every tensor of weight_shapes() with its shape and nothing else, else CheckpointError."""
        check_weights(weights, self.weight_shapes(), source)
        self.load(weights.__getitem__, weight_uploader(self.be, self.dtype))

    # ---- running -------------------------------------------------------------------------------------------

    def encode(self, ids: np.ndarray, seq_lens: np.ndarray, type_ids: np.ndarray | None = None) -> Array:
        """Final hidden states (T, D) of ids (T,) holding sequences of seq_lens (B,) tokens back to back;
        type_ids (T,) are the segment ids (0 everywhere when None)."""
        be = self.be
        positions = sequence_positions(seq_lens) + self.POSITION_OFFSET  # (T,)
        types = None if type_ids is None else be.upload(np.asarray(type_ids, dtype=np.int32))
        if types is None and getattr(self.embeddings, "token_type", None) is not None:
            types = be.upload(np.zeros(len(ids), dtype=np.int32))  # segment 0: what HF uses by default
        x = self.embeddings(
            be.upload(np.asarray(ids, dtype=np.int32)), be.upload(positions.astype(np.int32)), types
        )  # (T, D)
        trace("embed", -1, x)
        lens = be.upload(np.asarray(seq_lens, dtype=np.int32))  # (B,)
        attn_args = self.attention_args(seq_lens)
        for layer in self.layers:
            x = layer(x, lens, **attn_args)
        return x

    def attention_args(self, seq_lens: np.ndarray) -> dict[str, Any]:
        """Extra arguments every block's attention takes for this batch (MPNet's relative position bias)."""
        return {}

    def classify(self, hidden: Array, seq_lens: np.ndarray) -> np.ndarray:
        """(B, num_labels) scores of the classification head over each sequence's hidden states."""
        if self.head is None:
            raise TypeError("this model has no classification head")
        first = np.cumsum(seq_lens) - seq_lens  # (B,) the row of each sequence's first token
        return self.be.download(self.head(self.be.embed(hidden, self.be.upload(first.astype(np.int32)))))
