"""ModelRunner: scheduled batch -> ForwardBatch (ids, positions, slots, tables) -> model -> sampled ids."""

from __future__ import annotations

from typing import Any

import numpy as np

from blazr.backends.base import Backend
from blazr.engine.request import TokenLogprob
from blazr.engine.sampling import Sampler
from blazr.engine.scheduler import ScheduledBatch
from blazr.models.batch import ForwardBatch


def build_forward_batch(batch: ScheduledBatch, block_size: int) -> ForwardBatch:
    """Lay the batch's sequences back to back; logits rows are the last token of each sequence that samples
    (or of the last sequence when none does, so the model always returns at least one row)."""
    seqs = batch.seqs
    q_lens = np.array([len(s.token_ids) for s in seqs], dtype=np.int32)  # (B,)
    starts = np.array([s.start for s in seqs], dtype=np.int32)  # (B,)
    ends = np.cumsum(q_lens)  # (B,) one past each sequence's last row
    token_ids = np.concatenate([np.asarray(s.token_ids, dtype=np.int32) for s in seqs])  # (T,)
    positions = np.concatenate([np.arange(s.start, s.start + len(s.token_ids)) for s in seqs]).astype(
        np.int32
    )
    max_blocks = max(len(s.block_table) for s in seqs)
    tables = np.zeros((len(seqs), max_blocks), dtype=np.int32)  # (B, max_blocks), padding never read
    for b, s in enumerate(seqs):
        tables[b, : len(s.block_table)] = s.block_table
    seq_of_token = np.repeat(np.arange(len(seqs)), q_lens)  # (T,)
    slots = tables[seq_of_token, positions // block_size] * block_size + positions % block_size  # (T,)
    sampling = [b for b, s in enumerate(seqs) if s.sample] or [len(seqs) - 1]
    return ForwardBatch(
        token_ids=token_ids,
        positions=positions,
        slots=slots.astype(np.int32),
        block_tables=tables,
        ctx_lens=(starts + q_lens).astype(np.int32),
        q_lens=q_lens,
        logits_rows=(ends[sampling] - 1).astype(np.int32),
        block_size=block_size,
    )


class ModelRunner:
    """Owns the model's KV cache arrays and runs one scheduled batch per call."""

    def __init__(self, model: Any, backend: Backend, num_blocks: int, block_size: int):
        self.model = model
        self.backend = backend
        self.block_size = block_size
        self.cache = model.make_cache(num_blocks, block_size)  # list of (k, v), one pair per layer
        self.sampler = Sampler(backend)

    def execute(self, batch: ScheduledBatch) -> tuple[dict[str, int], dict[str, TokenLogprob]]:
        """Run the model on the batch and sample; returns ({request_id: token}, {request_id: logprobs})
        for the sequences that sample this step."""
        forward = build_forward_batch(batch, self.block_size)
        logits = self.model(forward, self.cache)  # (R, V)
        sampling = [s.request for s in batch.seqs if s.sample]
        if not sampling:
            return {}, {}
        ids, logprobs = self.sampler.sample(logits, sampling)
        tokens = {r.request_id: t for r, t in zip(sampling, ids, strict=True)}
        return tokens, {r.request_id: lp for r, lp in zip(sampling, logprobs, strict=True) if lp is not None}
