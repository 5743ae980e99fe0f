"""ForwardBatch: everything a model forward pass needs besides weights and cache (built by the engine's runner)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ForwardBatch:
    """B sequences, T new tokens in all, laid back to back (see Backend.attention for the cache layout)."""

    token_ids: np.ndarray  # (T,) int32 new tokens
    positions: np.ndarray  # (T,) int32 position of each new token in its sequence
    slots: np.ndarray  # (T,) int32 KV-cache slot each new token is written to
    block_tables: np.ndarray  # (B, max_blocks) int32 cache blocks of each sequence, in order
    ctx_lens: np.ndarray  # (B,) int32 context length of each sequence after this step
    q_lens: np.ndarray  # (B,) int32 new tokens of each sequence (sum = T)
    logits_rows: np.ndarray  # (R,) int32 rows of the T tokens whose logits are returned
    block_size: int
    # each sequence's LoRA adapter (blazr.models.lora.LoraAdapter) or None (B,); None: no sequence uses one
    adapters: tuple | None = None
    # (B,) int32 each sequence's recurrent-state slot (models with state-space layers); None: no state
    state_slots: np.ndarray | None = None

    @property
    def fresh(self) -> np.ndarray:
        """(B,) int32: 1 where a sequence's first token is in this batch (its recurrent state starts at zero)."""
        return (self.ctx_lens == self.q_lens).astype(np.int32)

    @classmethod
    def single(
        cls, token_ids, start: int, block_table, block_size: int, all_logits: bool = False
    ) -> ForwardBatch:
        """One sequence whose new tokens start at position `start`; logits of the last token (or all)."""
        ids = np.asarray(token_ids, dtype=np.int32)  # (T,)
        t = len(ids)
        positions = np.arange(start, start + t, dtype=np.int32)  # (T,)
        table = np.asarray(block_table, dtype=np.int32)  # (max_blocks,)
        slots = table[positions // block_size] * block_size + positions % block_size  # (T,)
        rows = np.arange(t, dtype=np.int32) if all_logits else np.array([t - 1], dtype=np.int32)
        return cls(
            token_ids=ids,
            positions=positions,
            slots=slots.astype(np.int32),
            block_tables=table[None, :],
            ctx_lens=np.array([start + t], dtype=np.int32),
            q_lens=np.array([t], dtype=np.int32),
            logits_rows=rows,
            block_size=block_size,
        )
