"""Draft-model drafting: a second, smaller model with the same vocabulary runs `k` cheap decode steps per
sequence (batched over the speculating sequences) in its own paged KV cache.

The drafter remembers which tokens each sequence's draft cache holds. Before drafting it keeps the longest
prefix those tokens share with the sequence (rejected drafts fall away: the context is truncated and blocks
past it are freed) and catches up on the rest in the first of its forward passes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blazr.backends.base import Backend, SampleParams
from blazr.engine.block_pool import BlockPool
from blazr.engine.kv_cache import KVCacheManager
from blazr.engine.request import Request
from blazr.engine.runner import build_forward_batch
from blazr.engine.sampling import needs_processing
from blazr.engine.scheduler import ScheduledBatch, ScheduledSeq
from blazr.engine.spec.distribution import processed_row, sample_from, sampling_distribution
from blazr.engine.spec.draft import Draft, SpecStats
from blazr.errors import ConfigError
from blazr.models.cache import is_stateful


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class DraftModelDrafter:
    """Proposes tokens with `model` (greedy at temperature 0, else sampled with the request's settings)."""

    def __init__(self, model: Any, backend: Backend, num_blocks: int, block_size: int, num_tokens: int):
        if is_stateful(model):
            raise ConfigError(
                "the draft model has state-space (Mamba) layers, whose recurrent state cannot roll back a "
                "rejected draft; pick a transformer draft model"
            )
        self.model = model
        self.backend = backend
        self.num_tokens = num_tokens
        self.block_size = block_size
        self.kv = KVCacheManager(BlockPool(num_blocks, block_size), enable_prefix_cache=False)
        self.cache = model.make_cache(num_blocks, block_size)  # the draft model's own (k, v) per layer
        self.cached_ids: dict[Request, list[int]] = {}  # tokens whose KV the draft cache holds
        self.stats = SpecStats()

    def release(self, request: Request) -> None:
        self.kv.free(request)
        self.cached_ids.pop(request, None)

    def propose(self, requests: list[Request], max_lens: list[int]) -> list[Draft]:
        limits = {r: n for r, n in zip(requests, max_lens, strict=True) if n > 0 and self._reserve(r, n)}
        drafts: dict[Request, list[int]] = {r: [] for r in limits}
        dists: dict[Request, list[np.ndarray]] = {r: [] for r in limits}
        feed = {r: r.all_ids[len(self.cached_ids[r]) :] for r in limits}  # tokens to run next, per sequence
        while active := [r for r in limits if len(drafts[r]) < limits[r]]:
            logits = self._forward(active, feed)  # (len(active), V)
            for r, token, q in zip(active, *self._choose(logits, active, drafts), strict=True):
                self.cached_ids[r] += feed[r]
                drafts[r].append(token)
                feed[r] = [token]
                if q is not None:
                    dists[r].append(q)
        return [
            Draft(drafts[r], np.stack(dists[r]) if dists[r] else None) if r in limits else Draft([])
            for r in requests
        ]

    def _reserve(self, request: Request, max_len: int) -> bool:
        """Roll the draft cache back to the prefix it shares with the sequence (leaving the last token to run)
        and hold blocks for the sequence plus max_len - 1 drafts; on a full pool drop it and do not draft."""
        ids = request.all_ids
        kept = min(common_prefix(self.cached_ids.get(request, []), ids), len(ids) - 1)
        self.cached_ids[request] = ids[:kept]
        self.kv.truncate(request, kept)
        if not self.kv.can_allocate(request, len(ids) + max_len - 1):
            self.release(request)
            return False
        self.kv.allocate(request, len(ids) + max_len - 1)
        return True

    def _forward(self, active: list[Request], feed: dict[Request, list[int]]) -> Any:
        seqs = [
            ScheduledSeq(r, len(self.cached_ids[r]), feed[r], list(self.kv.block_table(r)), sample=True)
            for r in active
        ]
        return self.model(build_forward_batch(ScheduledBatch(seqs), self.block_size), self.cache)

    def _choose(
        self, logits: Any, active: list[Request], drafts: dict[Request, list[int]]
    ) -> tuple[list[int], list[np.ndarray | None]]:
        """Each sequence's next draft token and, when sampled, the distribution q it was drawn from."""
        if not any(needs_processing(r.params) or r.params.temperature > 0 for r in active):
            zeros = np.zeros(len(active), dtype=np.float32)
            greedy = SampleParams(zeros, zeros.astype(np.int32), zeros + 1, zeros, zeros.astype(np.float64))
            return [int(t) for t in self.backend.download(self.backend.sample(logits, greedy))], [None] * len(
                active
            )
        host = self.backend.download(logits)  # (len(active), V)
        tokens: list[int] = []
        dists: list[np.ndarray | None] = []
        for row, r in zip(host, active, strict=True):
            q = sampling_distribution(processed_row(row, r, drafts[r]), r.params)  # (V,)
            sampled = r.params.temperature > 0
            tokens.append(sample_from(q, r.rng.random()) if sampled else int(np.argmax(q)))
            dists.append(q if sampled else None)
        return tokens, dists
