"""BERT (HF BertModel, model_type bert): the encoder of sentence-transformers models such as all-MiniLM-L6-v2,
and BertForSequenceClassification, the cross-encoder rerankers (ms-marco MiniLM, BGE-reranker-base's kin).

Embeddings: word + absolute position + token type, then a LayerNorm. Post-norm blocks: attention with q/k/v and
output biases (`attention.self.{query,key,value}`, `attention.output.dense`) then `attention.output.LayerNorm`;
the MLP `intermediate.dense` -> GELU -> `output.dense`, then `output.LayerNorm`. A classifier adds the pooler
(dense + tanh over the first token) and `classifier` (num_labels, D). GGUF: llama.cpp's `bert` files (below).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, Array, BaseModelArgs
from blazr.models.encoder import AbsoluteEmbeddings, EncoderModel, PostNormEncoderBlock, classifier_task
from blazr.models.layers.dense_attention import DenseSelfAttention
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm

ACTIVATIONS = HF_ACTIVATIONS | {"gelu_new": "gelu_tanh"}
CLASSIFIERS = ("BertForSequenceClassification",)


task = classifier_task(CLASSIFIERS)  # blazr.models.model_task


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "bert"
    architectures: list[str] = field(default_factory=lambda: ["BertModel"])
    vocab_size: int = 30522
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    position_embedding_type: str = "absolute"
    num_labels: int | None = None  # (optional) classifiers: else len(id2label)
    id2label: dict[str, str] | None = None
    # classifiers: whether the head has its pooler layer; False only for GGUF files of llama.cpp's converter,
    # which drops bert.pooler.dense (llama.cpp then scores classifier(first token), and so does blazr)
    classifier_pooler: bool = True
    # classifiers: the activation after the pooler, None for the family's own (HEAD); GGUF files of DistilBERT
    # rerankers, which the converter writes as "bert", say "relu" (their pre_classifier's)
    classifier_act: str | None = None

    def __post_init__(self):
        if self.position_embedding_type != "absolute":
            raise UnsupportedError(
                f"BERT position_embedding_type {self.position_embedding_type!r} is not supported; "
                "only 'absolute' runs"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedError(f"BERT hidden_act {self.hidden_act!r} is not supported")
        if self.num_labels is None:
            self.num_labels = len(self.id2label) if self.id2label else 2

    @property
    def is_classifier(self) -> bool:
        return bool(self.architectures) and self.architectures[0] in CLASSIFIERS


class ClassificationHead(Module):
    """act(pooler(first token)) -> classifier: (B, D) -> (B, num_labels). `names` are the checkpoint's (pooler,
    classifier) layers: BERT's ("pooler.dense", "classifier") with tanh, RoBERTa's ("classifier.dense",
    "classifier.out_proj") with tanh, DistilBERT's ("pre_classifier", "classifier") with ReLU."""

    OPS = ("matmul", "binary", "act")

    def __init__(
        self,
        backend,
        dim: int,
        labels: int,
        names: tuple[str, str] = ("pooler.dense", "classifier"),
        act: str = "tanh",
    ):
        self.be, self.dim, self.labels, self.names, self.act = backend, dim, labels, names, act
        self.pooler = self.pooler_bias = self.classifier = self.classifier_bias = None

    def declare(self) -> Iterator[Weight]:
        (pooler, classifier), d, n = self.names, self.dim, self.labels
        if pooler is not None:  # None: the classifier reads the first token as it is
            yield weight("pooler", f"{pooler}.weight", (d, d))  # (D, D)
            yield weight("pooler_bias", f"{pooler}.bias", (d,))
        yield weight("classifier", f"{classifier}.weight", (n, d))  # (labels, D)
        yield weight("classifier_bias", f"{classifier}.bias", (n,))

    def __call__(self, first: Array) -> Array:
        be, pooled = self.be, first  # (B, D)
        if self.names[0] is not None:
            pooled = be.act(be.binary("add", be.matmul(first, self.pooler), self.pooler_bias), self.act)
        return be.binary("add", be.matmul(pooled, self.classifier), self.classifier_bias)  # (B, labels)


class Model(EncoderModel):
    PREFIX = "bert."  # where BertFor* checkpoints nest the encoder
    HEAD = (("pooler.dense", "classifier"), "tanh")  # ClassificationHead's names and activation
    # saved buffers and heads that are not part of what runs (the masked-LM head)
    UNUSED: tuple[str, ...] = ("embeddings.position_ids", "embeddings.token_type_ids", "cls.")

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        d, eps = args.hidden_size, args.layer_norm_eps
        self.embeddings = AbsoluteEmbeddings(
            backend, args.vocab_size, d, args.max_position_embeddings, args.type_vocab_size, eps
        )
        self.layers = [self._block(i) for i in range(args.num_hidden_layers)]
        names, act = self.HEAD
        names = names if args.classifier_pooler else (None, names[1])
        act = args.classifier_act or act
        self.head = (
            ClassificationHead(backend, d, args.num_labels, names, act) if args.is_classifier else None
        )

    def _block(self, i: int) -> Module:
        a, be = self.args, self.be
        attn = DenseSelfAttention(
            be,
            a.hidden_size,
            a.num_attention_heads,
            i,
            ("self.query", "self.key", "self.value", "output.dense"),
        )
        mlp = MLP(
            be,
            a.hidden_size,
            a.intermediate_size,
            ACTIVATIONS[a.hidden_act],
            i,
            names=("intermediate.dense", "output.dense"),
        )
        norm = lambda: LayerNorm(be, a.hidden_size, a.layer_norm_eps)  # noqa: E731
        names = ("attention.", "attention.output.LayerNorm.", "", "output.LayerNorm.")
        return PostNormEncoderBlock(i, attn, norm(), mlp, norm(), names)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # *For* checkpoints nest the encoder under PREFIX; an embedder's pooler is not part of what runs,
        # nor is a pooler the head does not read (RoBERTa's classifier has its own dense layer)
        p = self.PREFIX
        out = {(k[len(p) :] if k.startswith(p) else k): v for k, v in weights.items()}
        uses_pooler = self.head is not None and self.HEAD[0][0].startswith("pooler.")
        drop = self.UNUSED + (() if uses_pooler else ("pooler.",))
        return {k: v for k, v in out.items() if not k.startswith(drop)}


# ---- GGUF: llama.cpp's "bert" architecture (its conversion/bert.py writes it) --------------------------------

GGUF_TENSOR_NAMES = {
    "token_embd": "embeddings.word_embeddings",
    "position_embd": "embeddings.position_embeddings",
    "token_types": "embeddings.token_type_embeddings",
    "token_embd_norm": "embeddings.LayerNorm",
    "blk.{N}.attn_q": "encoder.layer.{N}.attention.self.query",
    "blk.{N}.attn_k": "encoder.layer.{N}.attention.self.key",
    "blk.{N}.attn_v": "encoder.layer.{N}.attention.self.value",
    "blk.{N}.attn_output": "encoder.layer.{N}.attention.output.dense",
    "blk.{N}.attn_output_norm": "encoder.layer.{N}.attention.output.LayerNorm",
    "blk.{N}.ffn_up": "encoder.layer.{N}.intermediate.dense",
    "blk.{N}.ffn_down": "encoder.layer.{N}.output.dense",
    "blk.{N}.layer_output_norm": "encoder.layer.{N}.output.LayerNorm",
    "cls": "pooler.dense",  # no converter writes BERT's pooler yet (ModelArgs.classifier_pooler); read if there
    "cls.output": "classifier",  # BertForSequenceClassification's, renamed classifier.out_proj by the converter
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # no RoPE: q/k rows are as in HF
GGUF_CONFIG_READS_TENSORS = True  # a classifier and its pooler are told by the tensors the file has


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's reading of a bert file (src/models/bert.cpp): LayerNorm eps from
    attention.layer_norm_epsilon, the position table's length from context_length, the token-type count from
    token_types.weight. The activation is not written: BERT configs say exact "gelu". A cls.output tensor
    (labels, D) makes it a sequence classifier (a reranker).

    The converter writes RoBERTa, XLM-RoBERTa and DistilBERT as "bert" too, and they run as BERT: RoBERTa's
    position table comes without its padding_idx + 1 offset rows (positions start at 0, as here), its
    classifier.dense / out_proj as cls / cls.output (BERT's pooler and classifier, same tanh), its tokenizer
    ("gpt2" or "t5") gives segment 0 only. DistilBERT's file has no token_types (all other encoders have
    one) and its head's pre_classifier is followed by ReLU in HF's model: llama.cpp applies tanh to every
    bert file's cls, which changes such a reranker's scores; blazr keeps the model's ReLU."""
    out = config | {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "layer_norm_eps": float(get("attention.layer_norm_epsilon")),
        "type_vocab_size": shapes["token_types.weight"][0] if "token_types.weight" in shapes else 0,
        "hidden_act": "gelu",
    }
    if "cls.output.weight" in shapes:
        labels = get("classifier.output_labels", None) or []
        out |= {
            "architectures": ["BertForSequenceClassification"],
            "num_labels": shapes["cls.output.weight"][0],
            "id2label": {str(i): str(name) for i, name in enumerate(labels)} or None,
            "classifier_pooler": "cls.weight" in shapes,
        }
        if "token_types.weight" not in shapes and "cls.weight" in shapes:
            out["classifier_act"] = "relu"  # DistilBERT's pre_classifier (see above)
    return out
