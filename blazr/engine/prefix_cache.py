"""Prefix-cache keys: each full KV block is named by a SHA-256 of its token ids chained with the previous
block's key, so equal keys mean equal whole prefixes (a block's KV depends on every token before it).

SHA-256 rather than Python's hash: a collision would silently hand a sequence another prompt's KV.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass


def block_key(parent: bytes | None, token_ids: list[int]) -> bytes:
    """The key of one full block given the previous block's key (None for the first block)."""
    digest = hashlib.sha256(parent or b"")
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return digest.digest()


def extend_block_keys(
    keys: list[bytes], token_ids: list[int], block_size: int, num_blocks: int, salt: bytes | None = None
) -> list[bytes]:
    """Append the keys of blocks len(keys) .. num_blocks - 1 of `token_ids` (all full) to `keys`, in place.
    `salt` is the first block's parent: sequences run with other weights (a LoRA adapter) never share KV."""
    for i in range(len(keys), num_blocks):
        keys.append(block_key(keys[-1] if keys else salt, token_ids[i * block_size : (i + 1) * block_size]))
    return keys


@dataclass
class PrefixCacheStats:
    """Counters for metrics: prompt tokens looked up at admission and how many came from the cache."""

    queried_tokens: int = 0
    hit_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0
