"""ModelRunner: scheduled batch -> ForwardBatch (ids, positions, slots, tables) -> model -> sampled ids.
Also sizes the KV pool, since the runner owns the model's cache arrays."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from blazr.backends.base import Backend
from blazr.engine.block_pool import blocks_needed
from blazr.engine.request import Request, TokenLogprob
from blazr.engine.sampling import Sampler
from blazr.engine.scheduler import ScheduledBatch
from blazr.engine.spec.verify import Verifier, draft_of
from blazr.errors import ConfigError
from blazr.models.batch import ForwardBatch
from blazr.models.cache import is_stateful, kv_arrays


def cache_bytes_per_block(model: Any, block_size: int) -> int:
    """Bytes one KV block takes over all layers, measured on a one-block cache from the model itself."""
    total, seen = 0, set()
    for entry in make_cache(model, 1, block_size, 1):
        for array in kv_arrays(entry):  # keys and values only: state slots are per sequence, not per block
            # one array may serve as keys and values (multi-head latent attention): counted once
            if array is not None and id(array) not in seen:
                seen.add(id(array))
                nbytes = getattr(array, "nbytes", None)
                total += (
                    nbytes
                    if nbytes is not None
                    else int(np.prod(array.shape)) * np.dtype(str(array.dtype)).itemsize
                )
    return max(total, 1)


# The default KV pool on the CPU takes at most this share of the RAM available when the model loads (the
# pool's pages are touched as blocks are first used, and the prefix cache keeps freed blocks' content, so a
# long-running server's pool ends up resident whole): like llama.cpp's and Ollama's fixed context budgets, it
# keeps a large num_ctx times max_seqs from promising more than the machine has. Past it, sequences queue or
# are preempted; kv_cache_bytes (--kv-cache-mb) sets the size outright. A GPU backend's pool lives in device
# memory and is not capped by the host's RAM.
DEFAULT_KV_RAM_SHARE = 0.25


def available_ram_bytes() -> int | None:
    """RAM the OS could give now (Linux: MemAvailable), else the physical total, else None (unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def kv_pool_blocks(
    model: Any,
    num_ctx: int,
    block_size: int,
    max_seqs: int,
    num_blocks: int | None = None,
    kv_cache_bytes: int | None = None,
) -> int:
    """Pool size: `num_blocks`, else what `kv_cache_bytes` holds, else `max_seqs` full contexts, on the CPU
    within DEFAULT_KV_RAM_SHARE of the available RAM. It must hold at least one sequence of num_ctx tokens, so
    one sequence always runs (others are preempted)."""
    per_seq = blocks_needed(num_ctx, block_size)
    source = "num_blocks"
    if num_blocks is None and kv_cache_bytes is not None:
        num_blocks, source = kv_cache_bytes // cache_bytes_per_block(model, block_size), "kv_cache_bytes"
    if num_blocks is None:
        full = max_seqs * per_seq
        ram = available_ram_bytes() if getattr(getattr(model, "be", None), "name", "") == "cpu" else None
        if ram is None:
            return full
        budget = int(ram * DEFAULT_KV_RAM_SHARE) // cache_bytes_per_block(model, block_size)
        return max(per_seq, min(full, budget))
    if num_blocks < per_seq:
        raise ConfigError(
            f"the KV cache ({source}) holds {num_blocks} blocks of {block_size} tokens but one sequence of "
            f"num_ctx={num_ctx} tokens needs {per_seq}; raise {source} or lower num_ctx"
        )
    return num_blocks


def make_cache(model: Any, num_blocks: int, block_size: int, num_seqs: int) -> list:
    """The model's per-layer cache entries: paged KV over num_blocks blocks, and num_seqs state slots when the
    model keeps recurrent state."""
    if is_stateful(model):
        return model.make_cache(num_blocks, block_size, num_seqs=num_seqs)
    return model.make_cache(num_blocks, block_size)


def build_forward_batch(batch: ScheduledBatch, block_size: int) -> ForwardBatch:
    """Lay the batch's sequences back to back; logits rows are the last token of each sequence that samples,
    preceded by one row per draft token when it speculates (or the last row of the last sequence when none
    samples, so the model always returns at least one row)."""
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
    sampling = [b for b, s in enumerate(seqs) if s.sample]
    rows = [np.arange(ends[b] - 1 - len(draft_of(seqs[b])), ends[b]) for b in sampling] or [ends[-1:] - 1]
    adapters = tuple(s.request.adapter for s in seqs)  # (B,) LoraAdapter or None
    state_slots = None
    if seqs[0].state_slot is not None:
        state_slots = np.array([s.state_slot for s in seqs], dtype=np.int32)  # (B,)
    return ForwardBatch(
        token_ids=token_ids,
        positions=positions,
        slots=slots.astype(np.int32),
        block_tables=tables,
        ctx_lens=(starts + q_lens).astype(np.int32),
        q_lens=q_lens,
        logits_rows=np.concatenate(rows).astype(np.int32),
        block_size=block_size,
        adapters=adapters if any(a is not None for a in adapters) else None,
        state_slots=state_slots,
    )


class ModelRunner:
    """Owns the model's KV cache arrays and runs one scheduled batch per call."""

    def __init__(self, model: Any, backend: Backend, num_blocks: int, block_size: int, num_seqs: int = 1):
        self.model = model
        self.backend = backend
        self.block_size = block_size
        # per layer a (k, v) pair, an SSMStateCache of num_seqs slots, or both (blazr.models.cache)
        self.cache = make_cache(model, num_blocks, block_size, num_seqs)
        self.sampler = Sampler(backend)
        self.verifier = Verifier(backend, self.sampler)

    def execute(
        self, batch: ScheduledBatch
    ) -> tuple[dict[Request, list[int]], dict[Request, list[TokenLogprob]]]:
        """Run the model on the batch and sample; returns ({sequence: new tokens}, {sequence: logprobs}) for
        the sequences that sample this step: one token each, or the accepted drafts plus one when speculating."""
        forward = build_forward_batch(batch, self.block_size)
        logits = self.model(forward, self.cache)  # (R, V)
        sampling = [s for s in batch.seqs if s.sample]
        if not sampling:
            return {}, {}
        if any(s.draft is not None for s in sampling):
            return self.verifier.verify(logits, sampling)
        requests = [s.request for s in sampling]
        ids, logprobs = self.sampler.sample(logits, requests)
        tokens = {r: [t] for r, t in zip(requests, ids, strict=True)}
        return tokens, {r: [lp] for r, lp in zip(requests, logprobs, strict=True) if lp is not None}
