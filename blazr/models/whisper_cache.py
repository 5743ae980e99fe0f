"""Whisper's decoding caches: cross-attention keys/values per audio window, self-attention keys/values per
decoded sequence (a window's beam or its one greedy sequence), and the per-step tables that index them.

A sequence owns a fixed run of `blocks_per_seq` blocks (enough for the decoder's 448 positions), so its block
table is a range and beams fork by copying rows (`reorder`), as openai-whisper and faster-whisper do: the
sequences are short and few, and a copy keeps the attention kernels the engine's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blazr.models.base import Array

BLOCK_SIZE = 16


@dataclass
class DecodeStep:
    """The device tables of one decoder call over some sequences (`seqs`, grouped by window)."""

    seqs: np.ndarray  # (B,) cache sequence of each batch row
    q_lens: np.ndarray  # (B,) tokens of each row in this call
    positions: Array  # (T,) decoder position of each token
    slots: Array  # (T,) self-attention cache slot of each token
    block_tables: Array  # (B, blocks_per_seq)
    ctx_lens: Array  # (B,) cached tokens of each row after this call
    q_lens_dev: Array  # (B,) q_lens on the device
    windows: np.ndarray  # (B,) the audio window of each row
    cross_tables: Array  # (B, cross_blocks) the blocks of each row's window in the cross-attention cache
    cross_ctx: Array  # (B,) encoder positions each row attends to (all of them)
    capture: bool = False  # keep each layer's cross-attention queries in cache.captured (word timing)

    @property
    def one_token_each(self) -> bool:
        return bool(np.all(self.q_lens == 1))


class WhisperCache:
    """Caches for `windows` audio windows decoded as `seqs_per_window` sequences each (beams)."""

    def __init__(self, model, windows: int, seqs_per_window: int = 1):
        be, a = model.be, model.args
        self.be, self.windows, self.seqs_per_window = be, windows, seqs_per_window
        self.block_size = BLOCK_SIZE
        self.blocks_per_seq = -(-a.max_target_positions // BLOCK_SIZE)
        self.seq_slots = self.blocks_per_seq * BLOCK_SIZE
        n_seqs, heads = windows * seqs_per_window, a.decoder_attention_heads
        head_dim = a.d_model // heads
        self.lengths = np.zeros(n_seqs, dtype=np.int64)  # tokens cached per sequence
        self.captured: dict[int, Array] = {}  # layer -> cross-attention queries (T, H, Dh) of a capture step
        self.self_kv = [
            (
                be.empty((n_seqs * self.seq_slots, heads, head_dim)),
                be.empty((n_seqs * self.seq_slots, heads, head_dim)),
            )
            for _ in range(a.decoder_layers)
        ]  # per layer: (S, H, Dh) keys and values
        self.positions_per_window = a.max_source_positions
        # whole blocks per window, so a decode step reads a window's keys through the paged kernel
        self.cross_blocks = -(-a.max_source_positions // BLOCK_SIZE)
        self.rows_per_window = self.cross_blocks * BLOCK_SIZE
        cross_rows = windows * self.rows_per_window
        self.cross_kv = [
            (be.empty((cross_rows, heads, head_dim)), be.empty((cross_rows, heads, head_dim)))
            for _ in range(a.decoder_layers)
        ]  # per layer: (W * rows_per_window, H, Dh), window w's P positions from row w * rows_per_window

    def window_of(self, seqs: np.ndarray) -> np.ndarray:
        return np.asarray(seqs) // self.seqs_per_window

    def cross_slots(self, window: int) -> Array:
        """(P,) cross-cache rows of `window`."""
        start = window * self.rows_per_window
        return self.be.upload(np.arange(start, start + self.positions_per_window, dtype=np.int32))

    def cross_keys(self, layer: int, window: int) -> tuple[Array, Array]:
        """Window `window`'s (P, H, Dh) cross-attention keys and values in `layer` (views)."""
        start = window * self.rows_per_window
        k, v = self.cross_kv[layer]
        return k[start : start + self.positions_per_window], v[start : start + self.positions_per_window]

    def step(self, seqs: np.ndarray, q_lens: np.ndarray) -> DecodeStep:
        """Tables for decoding q_lens[b] new tokens of sequence seqs[b] (rows grouped by window, in order)."""
        seqs, q_lens = np.asarray(seqs, dtype=np.int64), np.asarray(q_lens, dtype=np.int64)
        windows = self.window_of(seqs)
        if np.any(np.diff(windows) < 0):
            raise ValueError("decoder rows must be grouped by window, in window order")
        start = self.lengths[seqs]  # (B,)
        if np.any(start + q_lens > self.seq_slots):
            raise ValueError(f"a Whisper sequence holds at most {self.seq_slots} tokens")
        positions = np.concatenate([s + np.arange(q) for s, q in zip(start, q_lens, strict=True)])  # (T,)
        owner = np.repeat(seqs, q_lens)  # (T,) sequence of each token
        slots = owner * self.seq_slots + positions
        tables = seqs[:, None] * self.blocks_per_seq + np.arange(self.blocks_per_seq)[None, :]
        cross_tables = windows[:, None] * self.cross_blocks + np.arange(self.cross_blocks)[None, :]
        up, i32 = self.be.upload, np.int32
        return DecodeStep(
            seqs=seqs,
            q_lens=q_lens,
            positions=up(positions.astype(i32)),
            slots=up(slots.astype(i32)),
            block_tables=up(tables.astype(i32)),
            ctx_lens=up((start + q_lens).astype(i32)),
            q_lens_dev=up(q_lens.astype(i32)),
            windows=windows,
            cross_tables=up(cross_tables.astype(i32)),
            cross_ctx=up(np.full(len(seqs), self.positions_per_window, dtype=i32)),
        )

    def advance(self, step: DecodeStep) -> None:
        self.lengths[step.seqs] += step.q_lens

    def truncate(self, seqs: np.ndarray, length: int) -> None:
        """Forget every cached token past `length` of these sequences (a new attempt reuses its prompt)."""
        self.lengths[np.asarray(seqs)] = np.minimum(self.lengths[np.asarray(seqs)], length)

    def reorder(self, dest: np.ndarray, source: np.ndarray) -> None:
        """Sequence dest[i] becomes a copy of sequence source[i] (beam search keeps the best continuations):
        one gather per layer over the whole self-attention cache."""
        if np.array_equal(dest, source):
            return
        be, n = self.be, self.seq_slots
        seq_of_row = np.arange(len(self.lengths))
        seq_of_row[np.asarray(dest)] = np.asarray(source)
        rows = (seq_of_row[:, None] * n + np.arange(n)[None, :]).reshape(-1).astype(np.int32)  # (S,)
        rows_dev = be.upload(rows)
        for layer, (k, v) in enumerate(self.self_kv):
            s, h, dh = k.shape
            self.self_kv[layer] = tuple(
                be.embed(c.reshape(s, h * dh), rows_dev).reshape(s, h, dh) for c in (k, v)
            )
        self.lengths = self.lengths[seq_of_row]
