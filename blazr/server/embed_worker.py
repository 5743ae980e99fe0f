"""EmbedWorker: an encoder's own thread, which merges concurrent embedding requests into shared batches.

The server's counterpart of AsyncEngine for encoder models (blazr.tasks.embed.Embedder): requests queue
their token-id lists; the thread takes everything queued at once and runs it as one `embed_ids` call, which
packs the inputs back to back into forward passes of up to max_batch_tokens tokens (no padding), then hands
each request its rows. Sixteen clients sending one sentence each thus share one forward pass, as
text-embeddings-inference batches them. `run(fn)` runs other work (reranking, warm-up) on the same thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.engine.async_engine import EngineStoppedError


@dataclass
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    ids: list[list[int]] | None = None  # an embedding job's inputs
    skip: np.ndarray | None = None  # (N,) leading tokens of each left out of the pooling
    fn: Callable[[], Any] | None = None  # or a call


class EmbedWorker:
    """Runs one Embedder on its own thread; `embed` calls from the event loop are merged per batch."""

    def __init__(self, embedder: Any):
        self.embedder = embedder
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="blazr-embed", daemon=True)
        self._thread.start()

    async def embed(self, ids: list[list[int]], skip: np.ndarray | None = None) -> np.ndarray:
        """(N, D) vectors of token-id lists through the model's pipeline up to Normalize (pooling, Dense): the
        caller normalises as its request asks, so requests that differ in that still share a batch."""
        skip = np.zeros(len(ids), dtype=np.int64) if skip is None else skip
        return await self._submit(_Job(asyncio.get_running_loop(), self._future(), ids=ids, skip=skip))

    async def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on the worker thread, between batches; its result or its error."""
        return await self._submit(_Job(asyncio.get_running_loop(), self._future(), fn=fn))

    def shutdown(self, timeout: float | None = 5.0) -> None:
        self._stopped = True
        self._jobs.put(None)
        self._thread.join(timeout)

    def _future(self) -> asyncio.Future:
        if self._stopped:
            raise EngineStoppedError("the model was unloaded")
        return asyncio.get_running_loop().create_future()

    async def _submit(self, job: _Job) -> Any:
        self._jobs.put(job)
        return await job.future

    # ---- worker thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None or self._stopped:
                break
            jobs = [first] + self._drain()
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

    def _drain(self) -> list[_Job | None]:
        out = []
        while True:
            try:
                out.append(self._jobs.get_nowait())
            except queue.Empty:
                return out

    def _embed_together(self, jobs: list[_Job]) -> None:
        """One embed_ids call over every job's inputs; each job gets its own rows (or the shared error)."""
        ids = [x for job in jobs for x in job.ids]
        skip = np.concatenate([job.skip for job in jobs])  # (N,)
        try:
            vectors = self.embedder.embed_ids(ids, skip, normalize=False)  # (N, D): each request normalises
        except Exception as error:  # one bad batch fails its requests, never the worker
            for job in jobs:
                job.loop.call_soon_threadsafe(_set_exception, job.future, error)
            return
        start = 0
        for job in jobs:
            rows = vectors[start : start + len(job.ids)]
            start += len(job.ids)
            job.loop.call_soon_threadsafe(_set_result, job.future, rows)

    def _settle(self, job: _Job, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except Exception as error:
            job.loop.call_soon_threadsafe(_set_exception, job.future, error)
            return
        job.loop.call_soon_threadsafe(_set_result, job.future, result)

    def _fail_rest(self) -> None:
        for job in self._drain():
            if job is not None:
                error = EngineStoppedError("the model was unloaded before the request ran")
                job.loop.call_soon_threadsafe(_set_exception, job.future, error)


def _set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():  # the caller may have gone (cancelled)
        future.set_result(value)


def _set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
