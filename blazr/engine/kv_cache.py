"""Paged KV-cache bookkeeping: a pool of fixed-size blocks and one block table per sequence.

Pure Python: the pool hands out block ids; the model's cache arrays (from `model.make_cache`) hold the data.
A token at position p of a sequence lives in slot table[p // block_size] * block_size + p % block_size.
"""

from __future__ import annotations

from blazr.errors import BlazrError


class OutOfBlocksError(BlazrError):
    """The KV-cache pool has no free block left for a sequence."""


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class BlockPool:
    """Fixed-size KV blocks shared by all sequences; each sequence's table grows as the sequence grows."""

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"BlockPool needs num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # a stack: pop() gives low ids first
        self._tables: dict[str, list[int]] = {}

    @classmethod
    def for_context(cls, num_ctx: int, max_seqs: int, block_size: int) -> BlockPool:
        """Enough blocks for `max_seqs` sequences of `num_ctx` tokens each, so admitted ones never run out."""
        return cls(max_seqs * blocks_needed(num_ctx, block_size), block_size)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def block_table(self, seq_id: str) -> list[int]:
        """The sequence's blocks in order (empty if it holds none)."""
        return self._tables.get(seq_id, [])

    def can_allocate(self, seq_id: str, num_tokens: int) -> bool:
        """Whether the sequence can grow to hold `num_tokens` tokens in all."""
        return self._missing(seq_id, num_tokens) <= len(self._free)

    def allocate(self, seq_id: str, num_tokens: int) -> list[int]:
        """Grow the sequence's table to hold `num_tokens` tokens in all; returns the table.
        Raises OutOfBlocksError (and allocates nothing) when the pool is short."""
        missing = self._missing(seq_id, num_tokens)
        if missing > len(self._free):
            raise OutOfBlocksError(
                f"KV cache full: sequence {seq_id!r} needs {missing} more block(s) of {self.block_size} "
                f"tokens "
                f"but only {len(self._free)} of {self.num_blocks} are free; raise num_ctx or lower max_seqs"
            )
        table = self._tables.setdefault(seq_id, [])
        table.extend(self._free.pop() for _ in range(missing))
        return table

    def free(self, seq_id: str) -> None:
        """Return all of the sequence's blocks to the pool (a no-op for an unknown sequence)."""
        for block in reversed(self._tables.pop(seq_id, [])):
            self._free.append(block)

    def _missing(self, seq_id: str, num_tokens: int) -> int:
        return max(0, blocks_needed(num_tokens, self.block_size) - len(self._tables.get(seq_id, [])))
