"""PrefixRouter: which replica a request goes to, so a repeated prompt lands where its KV blocks are cached.

A prompt is cut into full blocks of the engines' block size; block i's key hashes blocks 0..i (a chain, as
the engine's prefix cache keys its blocks), so a key stands for a whole prefix. Each replica remembers the
keys of the prompts it was sent, least recently used dropped past `max_blocks` (the replica's own cache
evicts too; this is the router's guess of what it holds, as SGLang's cache-aware router keeps an
approximate tree per worker). A request goes to the live replica holding its longest prefix, unless that
replica has `max_imbalance` more requests in flight than the least loaded one; with no prefix held (or a
prompt shorter than a block) it goes to the least loaded, ties broken round-robin.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixRouter:
    def __init__(
        self, num_replicas: int, block_size: int = 16, max_blocks: int = 4096, max_imbalance: int = 4
    ):
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.max_imbalance = max_imbalance
        self.held: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_replicas)]
        self._next = 0  # round-robin start among equally loaded replicas

    def block_keys(self, prompt_ids: list[int]) -> list[int]:
        """One key per full block of the prompt, each hashing the whole prefix up to its block's end."""
        keys, key = [], 0
        for start in range(0, len(prompt_ids) - self.block_size + 1, self.block_size):
            key = hash((key, tuple(prompt_ids[start : start + self.block_size])))
            keys.append(key)
        return keys

    def pick(self, prompt_ids: list[int], in_flight: list[int], live: list[bool]) -> int | None:
        """The replica for this prompt, or None when no replica is live."""
        candidates = [i for i, up in enumerate(live) if up]
        if not candidates:
            return None
        least = min(in_flight[i] for i in candidates)
        keys = self.block_keys(prompt_ids)
        best, best_len = None, 0
        for i in candidates:
            matched = self._matched(i, keys)
            if matched > best_len and in_flight[i] - least <= self.max_imbalance:
                best, best_len = i, matched
        if best is not None:
            return best
        idle = [i for i in candidates if in_flight[i] == least]
        choice = min(idle, key=lambda i: (i - self._next) % len(live))
        self._next = (choice + 1) % len(live)
        return choice

    def record(self, replica: int, prompt_ids: list[int]) -> None:
        """Remember that `replica` now caches this prompt's blocks."""
        held = self.held[replica]
        for key in self.block_keys(prompt_ids):
            held[key] = None
            held.move_to_end(key)
        while len(held) > self.max_blocks:
            held.popitem(last=False)

    def forget(self, replica: int) -> None:
        """A replica that restarted holds nothing."""
        self.held[replica].clear()

    def _matched(self, replica: int, keys: list[int]) -> int:
        held = self.held[replica]
        count = 0
        for key in keys:
            if key not in held:
                break
            count += 1
        return count
