"""MPNet (HF MPNetModel, model_type mpnet): the encoder of all-mpnet-base-v2 and other sentence-transformers
models, and MPNetForSequenceClassification (a cross-encoder reranker).

BERT's post-norm encoder (blazr.models.bert) with these differences: the tensors are named
`attention.attn.{q,k,v,o}` and `attention.LayerNorm`; there are no token types; position ids start at
padding_idx + 1 = 2 as in RoBERTa (HF hard-codes padding_idx 1); and every layer adds to its attention scores
one relative position bias, T5-style: `encoder.relative_attention_bias` (num_buckets, H), shared by all layers,
read at the bucket of j - i (relative_position_bucket: bidirectional, 32 buckets, max_distance 128). The
buckets depend only on j - i, so each batch gets one (H, 2R + 1) table (R = the longest sequence - 1), made on
the host, which attention_dense adds per (query, key). The classifier is RoBERTa's: `classifier.dense` + tanh
+ `classifier.out_proj` over the first token. *For* checkpoints nest the encoder under "mpnet.".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.models import bert
from blazr.models.base import Array, host_array
from blazr.models.encoder import PostNormEncoderBlock, classifier_task
from blazr.models.layers.dense_attention import DenseSelfAttention
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm

CLASSIFIERS = ("MPNetForSequenceClassification",)
PADDING_IDX = 1  # HF's MPNetEmbeddings fixes it, whatever the config's pad_token_id
MAX_DISTANCE = 128  # relative_position_bucket's default, which MPNetEncoder uses


task = classifier_task(CLASSIFIERS)  # blazr.models.model_task


def relative_position_bucket(relative: np.ndarray, num_buckets: int = 32, max_distance: int = MAX_DISTANCE):
    """transformers' MPNetEncoder.relative_position_bucket of relative = key - query positions, in float32 as
    torch computes it: half the buckets for keys after the query; within a half, distances below a quarter of
    the buckets exactly, longer ones log-spaced up to max_distance (and beyond it, the last bucket)."""
    n = -np.asarray(relative, dtype=np.int64)
    half = num_buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore"):  # log(0) where n = 0: is_small picks n there
        scaled = np.log(n.astype(np.float32) / np.float32(max_exact))
    scaled = scaled / np.float32(math.log(max_distance / max_exact)) * np.float32(half - max_exact)
    large = max_exact + np.where(n < max_exact, 0, scaled).astype(np.int64)
    large = np.minimum(large, half - 1)
    return ret + np.where(n < max_exact, n, large)


@dataclass
class ModelArgs(bert.ModelArgs):
    model_type: str = "mpnet"
    architectures: list[str] = field(default_factory=lambda: ["MPNetModel"])
    vocab_size: int = 30527
    max_position_embeddings: int = 514  # 512 positions after the padding_idx + 1 offset
    type_vocab_size: int = 0
    relative_attention_num_buckets: int = 32

    @property
    def is_classifier(self) -> bool:
        return bool(self.architectures) and self.architectures[0] in CLASSIFIERS


class RelativeBias(Module):
    """`relative_attention_bias` (num_buckets, H), kept on the host: table() makes attention_dense's
    (H, 2R + 1) bias of a batch from it."""

    def __init__(self, backend, buckets: int, heads: int):
        self.be, self.buckets, self.heads = backend, buckets, heads
        self.weight: np.ndarray | None = None  # (buckets, H) f32, host

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "relative_attention_bias.weight", (self.buckets, self.heads))

    def load(self, get: Callable[[str], Any], upload: Callable[[Any], Array], prefix: str = "") -> None:
        self.weight = np.asarray(host_array(get(prefix + "relative_attention_bias.weight")), dtype=np.float32)

    def table(self, longest: int) -> Array:
        """(H, 2R + 1) on the device, R = longest - 1: column d + R holds the bias of key - query = d."""
        reach = max(0, longest - 1)
        buckets = relative_position_bucket(np.arange(-reach, reach + 1), self.buckets)  # (2R + 1,)
        return self.be.upload(np.ascontiguousarray(self.weight[buckets].T), "f32")  # (H, 2R + 1)


class Model(bert.Model):
    PREFIX = "mpnet."
    HEAD = (("classifier.dense", "classifier.out_proj"), "tanh")
    UNUSED = ("embeddings.position_ids", "lm_head.")

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        self.POSITION_OFFSET = PADDING_IDX + 1  # the first token's position id
        self.rel = RelativeBias(backend, args.relative_attention_num_buckets, args.num_attention_heads)

    def children(self) -> dict[str, Module]:
        return super().children() | {"encoder.": self.rel}

    def _block(self, i: int) -> Module:
        a, be = self.args, self.be
        names = ("attn.q", "attn.k", "attn.v", "attn.o")
        attn = DenseSelfAttention(be, a.hidden_size, a.num_attention_heads, i, names)
        act = bert.ACTIVATIONS[a.hidden_act]
        mlp = MLP(
            be, a.hidden_size, a.intermediate_size, act, i, names=("intermediate.dense", "output.dense")
        )
        norm = lambda: LayerNorm(be, a.hidden_size, a.layer_norm_eps)  # noqa: E731
        names = ("attention.", "attention.LayerNorm.", "", "output.LayerNorm.")
        return PostNormEncoderBlock(i, attn, norm(), mlp, norm(), names)

    def attention_args(self, seq_lens: np.ndarray) -> dict[str, Any]:
        longest = int(np.max(seq_lens)) if len(seq_lens) else 1
        return {"rel_bias": self.rel.table(longest)}

    def encode(self, ids: np.ndarray, seq_lens: np.ndarray, type_ids: np.ndarray | None = None) -> Array:
        """As EncoderModel.encode; MPNet has no token types."""
        return super().encode(ids, seq_lens, None)
