"""RoBERTa and XLM-RoBERTa (HF RobertaModel, XLMRobertaModel: model types roberta, xlm-roberta) and their
*ForSequenceClassification, the cross-encoder rerankers such as BGE-reranker-base (XLM-RoBERTa).

BERT's encoder (blazr.models.bert: same tensor names, post-norm blocks) with three differences: position ids
start at padding_idx + 1 (HF numbers the non-padding tokens from there, so the table has two more rows than
the longest input); the tokenizers give no segment ids (their model_input_names leave token_type_ids out), so
every token is segment 0, pairs included; and the classification head is `classifier.dense` + tanh +
`classifier.out_proj` over the first token (<s>), with no pooler. *For* checkpoints nest the encoder under
"roberta." (XLM-RoBERTa's too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blazr.models import bert
from blazr.models.base import Array
from blazr.models.encoder import classifier_task

CLASSIFIERS = ("RobertaForSequenceClassification", "XLMRobertaForSequenceClassification")


task = classifier_task(CLASSIFIERS)  # blazr.models.model_task


@dataclass
class ModelArgs(bert.ModelArgs):
    model_type: str = "roberta"
    architectures: list[str] = field(default_factory=lambda: ["RobertaModel"])
    vocab_size: int = 50265
    max_position_embeddings: int = 514  # 512 positions after the padding_idx + 1 offset
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1

    @property
    def is_classifier(self) -> bool:
        return bool(self.architectures) and self.architectures[0] in CLASSIFIERS


class Model(bert.Model):
    PREFIX = "roberta."
    HEAD = (("classifier.dense", "classifier.out_proj"), "tanh")
    UNUSED = ("embeddings.position_ids", "embeddings.token_type_ids", "lm_head.")

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        self.POSITION_OFFSET = args.pad_token_id + 1  # the first token's position id

    def encode(self, ids: np.ndarray, seq_lens: np.ndarray, type_ids: np.ndarray | None = None) -> Array:
        """As EncoderModel.encode, every token in segment 0 (HF's tokenizer gives the model no type ids)."""
        return super().encode(ids, seq_lens, None)
