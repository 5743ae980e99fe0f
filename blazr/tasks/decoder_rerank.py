"""Decoder rerankers (Qwen3-Reranker): a causal LM asked whether a document meets a query, scored as P("yes").

As Qwen3-Reranker's model card computes it: each pair becomes a chat prompt (a fixed system prompt, the user
turn "<Instruct>: ...\\n<Query>: ...\\n<Document>: ...", then the assistant's turn opened with an empty think
block); the prompt's three parts are tokenized separately (the pair text with the tokenizer's special tokens,
cut to fit the model's limit) and joined. The score is softmax over the logits of the "no" and "yes" tokens at
the last position, P("yes") = sigmoid(logit_yes - logit_no); raw scores are that difference. Pairs are packed
into forward passes as embeddings are (Embedder._batches), and only each pair's last row reaches the LM head.

llama.cpp's converter writes Qwen3-Reranker as a GGUF of pooling type RANK whose LM head is cut down to the two
rows that matter, `cls.output` (2, D) in the order of {arch}.classifier.output_labels ("yes", "no"); such a file
runs headless with those rows (RankHead) in place of the head, the same score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, InputError

SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
PREFIX = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
PAIR = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
ANSWERS = ("no", "yes")  # the two tokens compared, in the model card's order


RANK_TENSOR = "cls.output.weight"  # a RANK GGUF's head rows, as the loader names them


@dataclass
class RankHead:
    """The yes/no rows of a RANK GGUF: rows (2, D) on the device, and which row is which answer."""

    rows: Any
    yes: int
    no: int


def gguf_rank_head(checkpoint: Any) -> tuple[np.ndarray, int, int] | None:
    """(rows (2, D) float32, yes row, no row) of a RANK GGUF decoder reranker, else None."""
    meta = checkpoint.gguf_metadata or {}
    arch = meta.get("general.architecture", "")
    if meta.get(f"{arch}.pooling_type") != 4 or RANK_TENSOR not in checkpoint.tensors:
        return None
    labels = [str(x) for x in meta.get(f"{arch}.classifier.output_labels") or []]
    if sorted(labels) != sorted(("yes", "no")):
        raise CheckpointError(
            f"{checkpoint.path}: a RANK GGUF reranker needs {arch}.classifier.output_labels 'yes' and 'no' "
            f"naming the rows of {RANK_TENSOR}, not {labels}"
        )
    from blazr.models.base import host_array

    rows = np.asarray(host_array(checkpoint.tensors[RANK_TENSOR]), dtype=np.float32)  # (2, D)
    return rows, labels.index("yes"), labels.index("no")


def answer_ids(encoder: Any, source: Any = "") -> list[int]:
    """Token ids of "no" and "yes" (each a single token in the reranker's vocabulary)."""
    ids = [encoder.token_to_id(word) for word in ANSWERS]
    if None in ids:
        raise CheckpointError(
            f"{source}: a yes/no reranker needs single tokens 'yes' and 'no' in its vocabulary"
        )
    return ids


def pair_ids(
    embedder: Any, query: str, documents: Sequence[str], instruction: str | None, truncate: bool
) -> list[list[int]]:
    """The prompt token ids of each (query, document) pair, no longer than the model's limit."""
    encoder = embedder._encoder  # the model's tokenizer without a limit of its own
    prefix = encoder.encode(PREFIX, add_special_tokens=False).ids
    suffix = encoder.encode(SUFFIX, add_special_tokens=False).ids
    room = embedder.max_seq_length - len(prefix) - len(suffix) - embedder._special  # tokens of pair text
    if room <= 0:
        raise InputError(f"the model's limit of {embedder.max_seq_length} tokens leaves no room", "documents")
    out = []
    for i, document in enumerate(documents):
        text = PAIR.format(
            instruction=DEFAULT_INSTRUCTION if instruction is None else instruction,
            query=query,
            document=document,
        )
        enc = encoder.encode(text, add_special_tokens=False)
        if len(enc.ids) > room:
            if not truncate:
                raise InputError(
                    f"documents {i}: the prompt has {len(enc.ids) + len(prefix) + len(suffix)} tokens, more "
                    f"than the model's limit of {embedder.max_seq_length}; shorten it or allow truncation",
                    "documents",
                )
            enc.truncate(room)  # the end of the document goes, as the model card's right-side truncation
        out.append(prefix + encoder.post_process(enc).ids + suffix)
    return out


def scores(
    embedder: Any,
    query: str,
    documents: Sequence[str],
    truncate: bool = True,
    raw_scores: bool = False,
    instruction: str | None = None,
) -> np.ndarray:
    """(N,) P("yes") of each document (logit_yes - logit_no when raw_scores), float32."""
    head: RankHead | None = embedder.rank_head
    no, yes = answer_ids(embedder._encoder, embedder.checkpoint.path) if head is None else (head.no, head.yes)
    ids = pair_ids(embedder, query, documents, instruction, truncate)
    parts = []
    for start, stop in embedder._batches([len(x) for x in ids]):
        lens = np.array([len(x) for x in ids[start:stop]], dtype=np.int64)  # (B,)
        logits = _last_logits(embedder, head, np.concatenate(ids[start:stop]), lens)  # (B, V) or (B, 2)
        logits = np.asarray(embedder.backend.download(logits), dtype=np.float64)
        parts.append(logits[:, yes] - logits[:, no])  # (B,)
    margin = np.concatenate(parts)  # (N,) log P(yes) - log P(no)
    return (margin if raw_scores else 1.0 / (1.0 + np.exp(-margin))).astype(np.float32)


def _last_logits(embedder: Any, head: RankHead | None, ids: np.ndarray, lens: np.ndarray) -> Any:
    """Logits at each packed sequence's last token: the LM head's (B, V), or a RANK head's (B, 2)."""
    if head is None:
        return embedder.model.last_logits(ids, lens)
    be = embedder.backend
    hidden = embedder.model.encode(ids, lens)  # (T, D) final-norm states
    last = be.embed(hidden, be.upload((np.cumsum(lens) - 1).astype(np.int32)))  # (B, D)
    return be.matmul(last, head.rows)  # (B, 2)
