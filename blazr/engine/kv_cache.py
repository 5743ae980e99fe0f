"""Paged KV-cache bookkeeping: one block table per sequence over a shared BlockPool, and the prefix cache.

Pure Python. A token at position p of a sequence lives in slot table[p // block_size] * block_size +
p % block_size of every layer's cache arrays (from `model.make_cache`). Sequences share full blocks found in
the prefix cache (ref counted); a sequence only ever writes past its shared blocks, so no copy-on-write.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

from blazr.engine.block_pool import BlockPool, OutOfBlocksError, blocks_needed
from blazr.engine.prefix_cache import PrefixCacheStats

__all__ = ["BlockPool", "KVCacheManager", "OutOfBlocksError", "blocks_needed"]


class KVCacheManager:
    """Grows, shares and frees the block tables of sequences (any hashable id) on one pool."""

    def __init__(self, pool: BlockPool, enable_prefix_cache: bool = True):
        self.pool = pool
        self.block_size = pool.block_size
        self.enable_prefix_cache = enable_prefix_cache
        self._tables: dict[Hashable, list[int]] = {}
        self._committed: dict[Hashable, int] = {}  # leading blocks of each table already offered to the index
        self.stats = PrefixCacheStats()

    def block_table(self, seq: Hashable) -> list[int]:
        """The sequence's blocks in order (empty if it holds none)."""
        return self._tables.get(seq, [])

    def num_missing(self, seq: Hashable, num_tokens: int) -> int:
        """New blocks the sequence needs to hold `num_tokens` tokens in all."""
        return max(0, blocks_needed(num_tokens, self.block_size) - len(self._tables.get(seq, [])))

    def can_allocate(self, seq: Hashable, num_tokens: int) -> bool:
        return self.num_missing(seq, num_tokens) <= self.pool.num_free

    def allocate(self, seq: Hashable, num_tokens: int) -> list[int]:
        """Grow the sequence's table to hold `num_tokens` tokens in all; returns the table. Raises
        OutOfBlocksError (and allocates nothing) when the pool is short."""
        missing = self.num_missing(seq, num_tokens)
        if missing > self.pool.num_free:
            raise OutOfBlocksError(
                f"KV cache full: sequence {seq!r} needs {missing} more block(s) of {self.block_size} tokens "
                f"but only {self.pool.num_free} of {self.pool.num_blocks} are free"
            )
        table = self._tables.setdefault(seq, [])
        table.extend(self.pool.allocate() for _ in range(missing))
        return table

    def truncate(self, seq: Hashable, num_tokens: int) -> None:
        """Give back the blocks past the first `num_tokens` tokens (rejected speculative tokens' blocks);
        blocks already offered to the prefix-cache index stay."""
        table = self._tables.get(seq)
        if not table:
            return
        keep = max(blocks_needed(num_tokens, self.block_size), self._committed.get(seq, 0))
        while len(table) > keep:
            self.pool.release(table.pop())

    def free(self, seq: Hashable) -> None:
        """Let go of all the sequence's blocks (a no-op for an unknown sequence). The last block goes first,
        so among equally old cached blocks a prompt's tail is evicted before its head."""
        for block in reversed(self._tables.pop(seq, [])):
            self.pool.release(block)
        self._committed.pop(seq, None)

    # ---- prefix cache ------------------------------------------------------------------------------------

    def match_prefix(self, seq: Hashable, keys: list[bytes], num_tokens: int) -> int:
        """Give a sequence that holds no blocks the longest run of cached blocks whose keys match `keys`,
        leaving at least its last token to compute (the step needs its logits). Returns the tokens covered."""
        if self._tables.get(seq):
            raise RuntimeError(f"sequence {seq!r} already holds blocks; prefix matching is for admission")
        blocks: list[int] = []
        if self.enable_prefix_cache:
            for key in keys[: (num_tokens - 1) // self.block_size]:
                block = self.pool.lookup(key)
                if block is None:
                    break
                blocks.append(block)
        for block in blocks:
            self.pool.share(block)
        self._tables[seq] = blocks
        self._committed[seq] = len(blocks)
        cached = len(blocks) * self.block_size
        self.stats.queried_tokens += num_tokens
        self.stats.hit_tokens += cached
        return cached

    def pin(self, holder: Hashable, keys: list[bytes]) -> int:
        """Hold, under `holder` (a slot), the cached blocks of `keys` in order up to the first one not cached, so
        they are not evicted; returns how many. The holder must hold nothing yet."""
        if self._tables.get(holder):
            raise RuntimeError(f"{holder!r} already holds blocks")
        blocks: list[int] = []
        for key in keys:
            block = self.pool.lookup(key)
            if block is None:
                break
            self.pool.share(block)
            blocks.append(block)
        self._tables[holder] = blocks
        self._committed[holder] = len(blocks)
        return len(blocks)

    def commit(self, seq: Hashable, keys: list[bytes], num_computed: int) -> None:
        """Index the sequence's blocks that are full and computed (`keys` covers at least those)."""
        if not self.enable_prefix_cache:
            return
        table = self._tables.get(seq, [])
        full = min(num_computed // self.block_size, len(table))
        for i in range(self._committed.get(seq, 0), full):
            self.pool.register(table[i], keys[i])
        self._committed[seq] = max(full, self._committed.get(seq, 0))

    def holders(self) -> dict[int, int]:
        """{block: number of tables holding it} (for consistency checks)."""
        return dict(Counter(b for table in self._tables.values() for b in table))
