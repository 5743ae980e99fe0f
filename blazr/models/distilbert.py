"""DistilBERT (HF DistilBertModel, model_type distilbert): BERT's post-norm encoder under other names, and
DistilBertForSequenceClassification.

Embeddings: `embeddings.word_embeddings` + `position_embeddings` (learned, or sinusoidal ones saved in the same
tensor), no token types, then `embeddings.LayerNorm`. Blocks `transformer.layer.N.`: attention
`attention.{q_lin,k_lin,v_lin,out_lin}` with biases, then `sa_layer_norm`; the MLP `ffn.lin1` -> act ->
`ffn.lin2`, then `output_layer_norm`. Every LayerNorm has eps 1e-12 (fixed in HF's code, not in the config).
A classifier reads the first token: `pre_classifier` -> ReLU -> `classifier`, the encoder under "distilbert.".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from blazr.errors import UnsupportedError
from blazr.models.base import BaseModelArgs
from blazr.models.bert import ACTIVATIONS, ClassificationHead
from blazr.models.encoder import AbsoluteEmbeddings, EncoderModel, PostNormEncoderBlock, classifier_task
from blazr.models.layers.dense_attention import DenseSelfAttention
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module
from blazr.models.layers.norm import LayerNorm

CLASSIFIERS = ("DistilBertForSequenceClassification",)
EPS = 1e-12  # HF's DistilBERT LayerNorms


task = classifier_task(CLASSIFIERS)  # blazr.models.model_task


@dataclass
class ModelArgs(BaseModelArgs):
    # DistilBERT's config spells BERT's sizes its own way
    ALIASES: ClassVar[dict[str, str]] = {
        "dim": "hidden_size",
        "hidden_dim": "intermediate_size",
        "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads",
        "activation": "hidden_act",
    }

    model_type: str = "distilbert"
    architectures: list[str] = field(default_factory=lambda: ["DistilBertModel"])
    vocab_size: int = 30522
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    num_labels: int | None = None  # (optional) classifiers: else len(id2label)
    id2label: dict[str, str] | None = None

    def __post_init__(self):
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedError(f"DistilBERT activation {self.hidden_act!r} is not supported")
        if self.num_labels is None:
            self.num_labels = len(self.id2label) if self.id2label else 2

    @property
    def is_classifier(self) -> bool:
        return bool(self.architectures) and self.architectures[0] in CLASSIFIERS


class Model(EncoderModel):
    LAYERS = "transformer.layer.{}."

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        d = args.hidden_size
        self.embeddings = AbsoluteEmbeddings(
            backend, args.vocab_size, d, args.max_position_embeddings, 0, EPS
        )
        self.layers = [self._block(i) for i in range(args.num_hidden_layers)]
        if args.is_classifier:
            names = ("pre_classifier", "classifier")
            self.head = ClassificationHead(backend, d, args.num_labels, names, "relu")

    def _block(self, i: int) -> Module:
        a, be = self.args, self.be
        attn = DenseSelfAttention(
            be, a.hidden_size, a.num_attention_heads, i, ("q_lin", "k_lin", "v_lin", "out_lin")
        )
        mlp = MLP(
            be, a.hidden_size, a.intermediate_size, ACTIVATIONS[a.hidden_act], i, names=("lin1", "lin2")
        )
        norm = lambda: LayerNorm(be, a.hidden_size, EPS)  # noqa: E731
        names = ("attention.", "sa_layer_norm.", "ffn.", "output_layer_norm.")
        return PostNormEncoderBlock(i, attn, norm(), mlp, norm(), names)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # *For* checkpoints nest the encoder under "distilbert."; the masked-LM head (vocab_*) does not run
        p = "distilbert."
        out = {(k[len(p) :] if k.startswith(p) else k): v for k, v in weights.items()}
        drop = ("embeddings.position_ids", "vocab_transform.", "vocab_layer_norm.", "vocab_projector.")
        return {k: v for k, v in out.items() if not k.startswith(drop)}
