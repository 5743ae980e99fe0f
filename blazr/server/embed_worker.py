"""EmbedWorker: an encoder's own thread, which merges concurrent embedding requests into shared batches.

The server's counterpart of AsyncEngine for encoder models (blazr.tasks.embed.Embedder): requests queue
their token-id lists; the thread takes everything queued at once and runs it as one `embed_ids` call, which
packs the inputs back to back into forward passes of up to max_batch_tokens tokens (no padding), then hands
each request its rows. Sixteen clients sending one sentence each thus share one forward pass, as
text-embeddings-inference batches them. `run(fn)` runs other work (reranking, warm-up) on the same thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.server.model_worker import ModelWorker, set_exception, set_result


@dataclass
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    ids: list[list[int]] | None = None  # an embedding job's inputs
    skip: np.ndarray | None = None  # (N,) leading tokens of each left out of the pooling
    fn: Callable[[], Any] | None = None  # or a call


class EmbedWorker(ModelWorker):
    """Runs one Embedder on its own thread; `embed` calls from the event loop are merged per batch."""

    THREAD_NAME = "blazr-embed"

    def __init__(self, embedder: Any):
        self.embedder = embedder
        super().__init__()

    async def embed(self, ids: list[list[int]], skip: np.ndarray | None = None) -> np.ndarray:
        """(N, D) vectors of token-id lists through the model's pipeline up to Normalize (pooling, Dense): the
        caller normalises as its request asks, so requests that differ in that still share a batch."""
        skip = np.zeros(len(ids), dtype=np.int64) if skip is None else skip
        return await self._submit(_Job(asyncio.get_running_loop(), self._future(), ids=ids, skip=skip))

    def _call_job(self, fn: Callable[[], Any]) -> _Job:
        return _Job(asyncio.get_running_loop(), self._future(), fn=fn)

    # ---- worker thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            jobs = self._take(block=True)
            if jobs[0] is None or self._stopped:
                break
            stop = None in jobs
            jobs = [j for j in jobs if j is not None]
            for job in (j for j in jobs if j.fn is not None):
                self._settle(job, job.fn)
            embeds = [j for j in jobs if j.ids is not None]
            if embeds:
                self._embed_together(embeds)
            if stop:
                break
        self._fail_rest()

    def _embed_together(self, jobs: list[_Job]) -> None:
        """One embed_ids call over every job's inputs; each job gets its own rows (or the shared error)."""
        ids = [x for job in jobs for x in job.ids]
        skip = np.concatenate([job.skip for job in jobs])  # (N,)
        try:
            vectors = self.embedder.embed_ids(ids, skip, normalize=False)  # (N, D): each request normalises
        except Exception as error:  # one bad batch fails its requests, never the worker
            for job in jobs:
                job.loop.call_soon_threadsafe(set_exception, job.future, error)
            return
        start = 0
        for job in jobs:
            rows = vectors[start : start + len(job.ids)]
            start += len(job.ids)
            job.loop.call_soon_threadsafe(set_result, job.future, rows)
