"""The embed task: sentence vectors and reranker scores from an encoder, as sentence-transformers computes them.

    import blazr
    model = blazr.load("all-minilm")
    vectors = model.embed(["A man is eating food.", "A man rides a horse."])  # (2, 384), unit rows

Inputs are tokenized (truncated to the model's max_seq_length unless told not to), packed back to back into
batches of at most `max_batch_tokens` tokens with no padding, run through the encoder (attention stays inside
each sequence), then pooled, projected and normalised by the model's sentence-transformers modules
(blazr.tasks.sentence_modules). A cross-encoder (a sequence classifier) scores query/document pairs instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

from blazr.errors import InputError, UnsupportedError
from blazr.tasks import decoder_rerank
from blazr.tasks.sentence_modules import SentenceModules, pool, read_sentence_modules

DEFAULT_BATCH_TOKENS = 8192  # tokens per forward pass: big enough to fill the matmuls, small enough for L2/L3
DIRECTIONS = ("right", "left")  # which end of an over-long input truncation cuts


class Embedder:
    """A loaded encoder with its tokenizer and sentence-transformers pipeline. `task` is "embed" (a bi-encoder:
    `embed`, and `rerank` by cosine) or "rerank" (a cross-encoder: `rerank` scores pairs)."""

    def __init__(
        self,
        checkpoint: Any,
        tokenizer: Any,
        model: Any,
        backend: Any,
        modules: SentenceModules,
        task: str,
        max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
        rank_head: Any = None,
    ):
        self.checkpoint, self.tokenizer, self.model, self.backend = checkpoint, tokenizer, model, backend
        self.modules, self.task, self.max_batch_tokens = modules, task, max_batch_tokens
        self.rank_head = rank_head  # a RANK GGUF reranker's yes/no rows (decoder_rerank.RankHead), else None
        self._encoder = _untruncated(tokenizer.inner)  # the model's tokenizer with no limit of its own
        self._special = self._encoder.num_special_tokens_to_add(False)  # e.g. [CLS] and [SEP]

    @classmethod
    def load(
        cls,
        model: str | Path | Any,
        device: Any = "cpu",
        dtype: str | None = None,
        task: str | None = None,
        **options: Any,
    ) -> Embedder:
        """Load an encoder by path or catalog name onto `device` (a name as blazr.load takes, or a backend).
        `task="rerank"` loads a causal LM as a yes/no reranker (Qwen3-Reranker: nothing in its checkpoint
        says so); otherwise the checkpoint's own task is used."""
        from blazr.backends import get_backend
        from blazr.loaders import open_model
        from blazr.models import build_model, model_task
        from blazr.tokenizer import load_tokenizer

        checkpoint = open_model(model)
        own = model_task(checkpoint.config, checkpoint.gguf_metadata, checkpoint.directory)
        task = _chosen_task(checkpoint.path, own, task)
        backend = get_backend(device) if isinstance(device, str) else device
        # Exact float32 activations unless asked otherwise: rounding them to int8 (the CPU's default for packed
        # weights in text generation) reordered all-MiniLM Q8_0's similarity ranking (cosine 0.9975 against
        # 0.9994 in float32), and the ranking is what an embedding is for
        rank = decoder_rerank.gguf_rank_head(checkpoint)  # (2, D) yes/no rows, yes, no; or None
        weights = checkpoint
        if rank is not None:  # the rows replace the LM head: the decoder itself loads headless
            tensors = {k: v for k, v in checkpoint.tensors.items() if k != decoder_rerank.RANK_TENSOR}
            weights = dataclasses.replace(checkpoint, tensors=tensors)
        net = build_model(weights, backend, dtype or "f32", lm_head=task != "embed" and rank is None)
        modules = read_sentence_modules(Path(checkpoint.directory), checkpoint.gguf_metadata)
        head = (
            None if rank is None else decoder_rerank.RankHead(net.be.upload(rank[0], "f32"), rank[1], rank[2])
        )
        return cls(
            checkpoint, load_tokenizer(checkpoint), net, net.be, modules, task, rank_head=head, **options
        )

    # ---- what it gives -----------------------------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """Length of the vectors `embed` returns (before any `dimensions` shortening)."""
        dense = self.modules.dense
        width = dense[-1].weight.shape[0] if dense else self.model.hidden_size * len(self.modules.pooling)
        return int(width)

    @property
    def max_seq_length(self) -> int:
        """The most tokens (special tokens included) an input keeps."""
        own = self.modules.max_seq_length
        return min(own, self.model.max_positions) if own else self.model.max_positions

    @property
    def is_decoder(self) -> bool:
        """A causal decoder (a decoder embedder or yes/no reranker) rather than a bidirectional encoder."""
        from blazr.models.decoder import DecoderLM

        return isinstance(self.model, DecoderLM)

    @property
    def vocab_size(self) -> int:
        return int(self.model.args.vocab_size)

    # ---- embeddings ---------------------------------------------------------------------------------------

    def embed(
        self,
        inputs: Sequence[str | Sequence[int]],
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        dimensions: int | None = None,
        truncate: bool = True,
        truncation_direction: str = "right",
        normalize: bool | None = None,
    ) -> np.ndarray:
        """(N, D) float32 sentence vectors of `inputs` (strings, or token-id lists used as they are).
        `prompt_name` picks one of the model's prompts ("query", ...) and `prompt` gives one, prepended to
        every string; `dimensions` keeps the first D values (Matryoshka models), renormalised when the model
        normalises; `normalize` overrides the model's Normalize module. Raises InputError on bad input."""
        ids, skip = self.prepare(inputs, prompt_name, prompt, dimensions, truncate, truncation_direction)
        normalize = self.modules.normalize if normalize is None else normalize
        return self.shorten(self.embed_ids(ids, skip, normalize), dimensions, normalize)

    def prepare(
        self,
        inputs: Sequence[str | Sequence[int]],
        prompt_name: str | None = None,
        prompt: str | None = None,
        dimensions: int | None = None,
        truncate: bool = True,
        truncation_direction: str = "right",
    ) -> tuple[list[list[int]], np.ndarray]:
        """Checked token ids of each input and (N,) the leading prompt tokens to leave out of the pooling:
        everything `embed` does before the forward pass (the server then batches the ids with others')."""
        if self.task != "embed":
            raise UnsupportedError(
                f"{self.checkpoint.path} is a reranker (cross-encoder): it scores query/document pairs "
                "with rerank() and gives no embeddings"
            )
        if dimensions is not None and not 0 < dimensions <= self.dimension:
            raise InputError(f"dimensions={dimensions} must be between 1 and {self.dimension}", "dimensions")
        text = self._prompt(prompt_name, prompt)
        ids = self.tokenize(inputs, text, truncate, truncation_direction)
        skip = np.zeros(len(ids), dtype=np.int64)  # (N,)
        if text and not self.modules.include_prompt:  # as sentence-transformers: the prompt less its [SEP]
            skip[[isinstance(x, str) for x in inputs]] = len(self._encode(text).ids) - 1
        return ids, skip

    def shorten(
        self, vectors: np.ndarray, dimensions: int | None, normalize: bool | None = None
    ) -> np.ndarray:
        """The first `dimensions` values of each vector (all when None), renormalised if `normalize`
        (default: when the model normalises)."""
        if dimensions is None:
            return vectors
        normalize = self.modules.normalize if normalize is None else normalize
        short = np.ascontiguousarray(vectors[:, :dimensions])  # (N, dimensions)
        return unit_rows(short) if normalize else short

    def embed_ids(
        self, ids: list[list[int]], skip: np.ndarray | None = None, normalize: bool | None = None
    ) -> np.ndarray:
        """(N, D) vectors of token-id lists after pooling and Dense, unit rows if `normalize` (default: as
        the model's pipeline says)."""
        skip = np.zeros(len(ids), dtype=np.int64) if skip is None else skip
        out = []
        for start, stop in self._batches([len(x) for x in ids]):
            lens = np.array([len(x) for x in ids[start:stop]], dtype=np.int64)  # (B,)
            hidden = self.backend.download(self.model.encode(np.concatenate(ids[start:stop]), lens))  # (T, D)
            out.append(
                pool(np.asarray(hidden, dtype=np.float32), lens, self.modules.pooling, skip[start:stop])
            )
        vectors = np.concatenate(out) if out else np.zeros((0, self.dimension), np.float32)  # (N, D)
        for dense in self.modules.dense:
            vectors = dense(vectors)
        normalize = self.modules.normalize if normalize is None else normalize
        return unit_rows(vectors) if normalize else vectors

    def warm_up(self) -> None:
        """Embed (or score) a short and a long text once, so the first request finds the kernels of both
        paths compiled (blazr.engine.warm_up)."""
        from blazr.engine.warm_up import FILLER_TEXT

        long_text = FILLER_TEXT * 2  # ~40 tokens: past every format's GEMM crossover
        if self.task == "rerank":
            self.rerank("Hello", ["Hello", long_text])
        else:
            self.embed(["Hello", long_text])

    # ---- reranking ----------------------------------------------------------------------------------------

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        truncate: bool = True,
        raw_scores: bool = False,
        instruction: str | None = None,
    ) -> np.ndarray:
        """(N,) relevance of each document to the query: a cross-encoder's score (sigmoid of its logit unless
        raw_scores), a decoder reranker's P("yes") (logit("yes") - logit("no") if raw_scores; `instruction`
        is its task description), or, for a bi-encoder, the cosine similarity of the two vectors."""
        if not documents:
            raise InputError("documents is empty; give at least one document", "documents")
        for i, document in enumerate(documents):
            if not isinstance(document, str) or not document:
                raise InputError(f"documents {i} is not a non-empty string", "documents")
        if self.is_decoder and self.task == "rerank":
            return decoder_rerank.scores(self, query, documents, truncate, raw_scores, instruction)
        if instruction is not None:
            raise InputError("instruction is for decoder rerankers (Qwen3-Reranker) only", "instruction")
        if self.task == "embed":
            vectors = self.embed(
                [query, *documents], truncate=truncate, normalize=True
            )  # (1 + N, D) unit rows
            return vectors[1:] @ vectors[0]
        return self._cross_scores(query, documents, truncate, raw_scores)

    def _cross_scores(
        self, query: str, documents: Sequence[str], truncate: bool, raw_scores: bool
    ) -> np.ndarray:
        if self.model.args.num_labels != 1:
            raise UnsupportedError(
                f"{self.checkpoint.path}: a reranker needs one output label, this classifier has "
                f"{self.model.args.num_labels}"
            )
        pairs = self._pair_encoder(truncate).encode_batch([(query, d) for d in documents])
        for i, enc in enumerate(pairs):
            self._check_length(len(enc.ids), i, truncate, "documents")
        scores = []
        for start, stop in self._batches([len(e.ids) for e in pairs]):
            batch = pairs[start:stop]
            lens = np.array([len(e.ids) for e in batch], dtype=np.int64)  # (B,)
            ids = np.concatenate([e.ids for e in batch])  # (T,)
            types = np.concatenate([e.type_ids for e in batch])  # (T,) 0 for the query, 1 for the document
            hidden = self.model.encode(ids, lens, types)  # (T, D)
            scores.append(np.asarray(self.model.classify(hidden, lens), dtype=np.float64)[:, 0])
        logits = np.concatenate(scores)  # (N,)
        return (logits if raw_scores else 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)

    # ---- tokens -------------------------------------------------------------------------------------------

    def tokenize(
        self,
        inputs: Sequence[str | Sequence[int]],
        prompt: str = "",
        truncate: bool = True,
        direction: str = "right",
    ) -> list[list[int]]:
        """Token ids of each input: strings get the prompt and the model's special tokens ([CLS] ... [SEP]);
        id lists are taken as they are. Over-long inputs are cut at `direction` to max_seq_length (special
        tokens kept), or raise InputError when truncate is False."""
        if isinstance(inputs, str) or not isinstance(inputs, Sequence) or len(inputs) == 0:
            raise InputError("input must be a non-empty list of strings or of token-id lists", "input")
        if direction not in DIRECTIONS:
            raise InputError(
                f"truncation_direction {direction!r} must be one of {DIRECTIONS}", "truncation_direction"
            )
        out = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                if not item:
                    raise InputError(f"input {i} is an empty string", "input")
                ids = self._encode(prompt + item, truncate, direction, i).ids
            else:
                ids = self._token_list(item, i)
                self._check_length(len(ids), i, truncate, "input")
                limit = self.max_seq_length
                ids = ids if len(ids) <= limit else (ids[:limit] if direction == "right" else ids[-limit:])
            out.append(ids)
        return out

    def _encode(self, text: str, truncate: bool = True, direction: str = "right", index: int = 0):
        """One tokenizers Encoding of text with special tokens, cut so it fits max_seq_length."""
        enc = self._encoder.encode(text, add_special_tokens=False)
        limit = self.max_seq_length - self._special
        if len(enc.ids) > limit:
            self._check_length(len(enc.ids) + self._special, index, truncate, "input")
            enc.truncate(limit, direction=direction)
        return self._encoder.post_process(enc)

    def _token_list(self, item: Any, index: int) -> list[int]:
        try:
            ids = [int(t) for t in item]
        except (TypeError, ValueError):
            raise InputError(f"input {index} is neither a string nor a list of token ids", "input") from None
        if not ids:
            raise InputError(f"input {index} is an empty token list", "input")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InputError(
                f"input {index}: token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})",
                "input",
            )
        return ids

    def _check_length(self, n: int, index: int, truncate: bool, field: str) -> None:
        if n > self.max_seq_length and not truncate:
            raise InputError(
                f"{field} {index} has {n} tokens, more than the model's limit of {self.max_seq_length}; "
                "shorten it or allow truncation",
                field,
            )

    def _pair_encoder(self, truncate: bool) -> tokenizers.Tokenizer:
        if not truncate:
            return self._encoder
        pair = tokenizers.Tokenizer.from_str(self._encoder.to_str())
        pair.enable_truncation(self.max_seq_length, strategy="longest_first")  # as transformers cuts pairs
        return pair

    def _prompt(self, prompt_name: str | None, prompt: str | None) -> str:
        if prompt is not None:
            return prompt
        name = prompt_name if prompt_name is not None else self.modules.default_prompt_name
        if name is None:
            return ""
        if name not in self.modules.prompts:
            known = ", ".join(sorted(self.modules.prompts)) or "none"
            raise InputError(
                f"prompt_name {name!r} is not one of this model's prompts ({known})", "prompt_name"
            )
        return self.modules.prompts[name]

    def _batches(self, lengths: list[int]) -> Iterator[tuple[int, int]]:
        """(start, stop) runs of consecutive inputs of at most max_batch_tokens tokens (at least one input)."""
        start, total = 0, 0
        for i, n in enumerate(lengths):
            if i > start and total + n > self.max_batch_tokens:
                yield start, i
                start, total = i, 0
            total += n
        if start < len(lengths):
            yield start, len(lengths)

    def __repr__(self) -> str:
        return f"Embedder({self.checkpoint.path}, task={self.task}, device={self.backend.name}, dim={self.dimension})"


def _chosen_task(path: Any, own: str, asked: str | None) -> str:
    """The task to load a checkpoint for: its own ("embed" / "rerank"), or "rerank" asked of a causal LM."""
    if asked not in (None, "embed", "rerank"):
        raise InputError(f"task {asked!r} must be 'embed' or 'rerank'", "task")
    if asked is None or asked == own:
        if own in ("transcribe", "speak", "review"):
            from blazr.models import wrong_task

            raise UnsupportedError(wrong_task(path, own, "embed"))
        if own not in ("embed", "rerank"):
            raise UnsupportedError(
                f"{path} is a {own} model, not an encoder; load it with blazr.load (or with task='rerank' "
                "for a yes/no decoder reranker such as Qwen3-Reranker)"
            )
        return own
    if asked == "rerank" and own == "generate":
        return "rerank"  # a causal LM scoring relevance as P("yes") (blazr.tasks.decoder_rerank)
    raise UnsupportedError(f"{path}'s own task is {own!r}; it cannot be loaded for {asked!r}")


def _untruncated(inner: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    """A copy of the tokenizer without the padding and truncation its tokenizer.json may carry."""
    copy = tokenizers.Tokenizer.from_str(inner.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Each row of x (N, D) scaled to length 1 (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)  # (N, 1)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32)
