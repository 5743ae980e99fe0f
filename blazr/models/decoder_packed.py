"""Whole sequences through a causal decoder at once: what a decoder embedder (Qwen3-Embedding, E5-Mistral) and a
decoder reranker (Qwen3-Reranker) need, with the EncoderModel interface (blazr.models.encoder).

`encode(ids, seq_lens)` lays B sequences back to back as one all-prefill ForwardBatch over a private paged KV
cache (the decoder's attention reads keys from its cache, so the cache stays; it is just sized for the batch
and kept for the next one) and returns the final-norm hidden states. DecoderLM mixes this in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blazr.models.base import Array
from blazr.models.batch import ForwardBatch

BLOCK_SIZE = 16  # tokens per block of the private cache: each sequence wastes at most 15 slots


def packed_prefill(seq_lens: np.ndarray, block_size: int = BLOCK_SIZE) -> tuple[np.ndarray, np.ndarray, int]:
    """(positions (T,), block_tables (B, max_blocks), blocks in all) of sequences of seq_lens (B,) tokens laid
    back to back, each starting at position 0 and owning consecutive cache blocks."""
    lens = np.asarray(seq_lens, dtype=np.int64)  # (B,)
    blocks = -(-lens // block_size)  # (B,) blocks each sequence needs
    first = np.cumsum(blocks) - blocks  # (B,) each sequence's first block
    total = int(blocks.sum())
    # entries past a sequence's own blocks are never read (attention stops at ctx_lens); clipped to stay valid
    tables = np.minimum(first[:, None] + np.arange(int(blocks.max()))[None, :], total - 1)  # (B, max_blocks)
    starts = np.repeat(np.cumsum(lens) - lens, lens)  # (T,) each token's sequence start
    positions = np.arange(int(lens.sum())) - starts  # (T,)
    return positions, tables, total


class PackedDecoder:
    """Mixed into DecoderLM: encoder-style calls on packed sequences, and running without an LM head."""

    args: Any
    be: Any
    dtype: str
    lm_head: Any
    EMBED: str
    HEAD: str
    headless = False  # embedding use: no LM head is loaded (bare-decoder checkpoints have none)
    _packed_cache: Any = None  # (blocks, KVCache) of the last encode, reused while big enough

    @property
    def hidden_size(self) -> int:
        return self.args.hidden_size

    @property
    def max_positions(self) -> int:
        """The longest sequence the model was trained for (its RoPE table covers)."""
        return self.args.max_position_embeddings

    def without_head(self) -> None:
        """Embedding use: hidden states are all that is read, so the LM head is neither expected nor loaded."""
        self.lm_head, self.headless = None, True

    def bare_names(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Checkpoint names as the causal LM has them: a bare decoder (Qwen3Model, MistralModel: what
        sentence-transformers saves) names its tensors without the "model." prefix; embedding use drops any
        LM head."""
        prefix = "model."
        if self.EMBED.startswith(prefix) and not any(k.startswith(prefix) for k in weights):
            weights = {k if k.startswith(self.HEAD) else prefix + k: v for k, v in weights.items()}
        if self.headless:
            weights = {k: v for k, v in weights.items() if not k.startswith(self.HEAD)}
        return weights

    def encode(self, ids: np.ndarray, seq_lens: np.ndarray, type_ids: np.ndarray | None = None) -> Array:
        """Final-norm hidden states (T, D) of ids (T,) holding sequences of seq_lens (B,) tokens back to back,
        each attending causally within itself. type_ids are ignored (a decoder has no segments)."""
        batch, cache = self._packed(ids, seq_lens)
        return self.hidden(batch, cache)  # type: ignore[attr-defined]

    def last_logits(self, ids: np.ndarray, seq_lens: np.ndarray) -> Array:
        """LM-head logits (B, V) at the last token of each of the packed sequences (as encode lays them)."""
        if self.headless:
            raise TypeError("this decoder was loaded for embedding, without its LM head")
        batch, cache = self._packed(ids, seq_lens)
        batch.logits_rows = (np.cumsum(seq_lens) - 1).astype(np.int32)  # (B,)
        return self(batch, cache)  # type: ignore[operator]

    def _packed(self, ids: np.ndarray, seq_lens: np.ndarray) -> tuple[ForwardBatch, Any]:
        lens = np.asarray(seq_lens, dtype=np.int32)  # (B,)
        positions, tables, blocks = packed_prefill(lens)
        if self._packed_cache is None or self._packed_cache[0] < blocks:
            self._packed_cache = None  # free the smaller one before the bigger one is made
            self._packed_cache = (blocks, self.make_cache(blocks, BLOCK_SIZE))  # type: ignore[attr-defined]
        seq_of_token = np.repeat(np.arange(len(lens)), lens)  # (T,)
        slots = tables[seq_of_token, positions // BLOCK_SIZE] * BLOCK_SIZE + positions % BLOCK_SIZE  # (T,)
        batch = ForwardBatch(
            token_ids=np.asarray(ids, dtype=np.int32),
            positions=positions.astype(np.int32),
            slots=slots.astype(np.int32),
            block_tables=tables.astype(np.int32),
            ctx_lens=lens,
            q_lens=lens,
            logits_rows=np.arange(len(positions), dtype=np.int32),  # every row: hidden() ignores them
            block_size=BLOCK_SIZE,
        )
        return batch, self._packed_cache[1]
