"""ModelWorker: the thread a loaded encoder or speech model runs on, and the queue that feeds it.

Requests on the event loop submit jobs and await their futures; the thread takes whatever is queued, runs it
(merged into batches by the subclass: blazr.server.embed_worker, blazr.server.transcribe_worker) and settles
each future on its own loop. `run(fn)` runs any other call on the same thread between batches. After
`shutdown()` new jobs fail at once and queued ones fail with EngineStoppedError.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

from blazr.engine.async_engine import EngineStoppedError


class ModelWorker:
    """Subclasses implement `_run` (the thread's loop); jobs carry `loop`, `future` and `fn` (or None)."""

    THREAD_NAME = "blazr-worker"

    def __init__(self):
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on the worker thread, between batches; its result or its error."""
        return await self._submit(self._call_job(fn))

    def shutdown(self, timeout: float | None = 5.0) -> None:
        self._stopped = True
        self._jobs.put(None)
        self._thread.join(timeout)

    def _call_job(self, fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def _run(self) -> None:
        raise NotImplementedError

    def _future(self) -> asyncio.Future:
        if self._stopped:
            raise EngineStoppedError("the model was unloaded")
        return asyncio.get_running_loop().create_future()

    async def _submit(self, job: Any) -> Any:
        self._jobs.put(job)
        return await job.future

    # ---- worker thread -----------------------------------------------------------------------------------

    def _take(self, block: bool) -> list[Any]:
        """Every queued job (waiting for the first when `block`); None marks a shutdown."""
        out = [self._jobs.get()] if block else []
        while True:
            try:
                out.append(self._jobs.get_nowait())
            except queue.Empty:
                return out

    @staticmethod
    def _settle(job: Any, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except Exception as error:
            job.loop.call_soon_threadsafe(set_exception, job.future, error)
            return
        job.loop.call_soon_threadsafe(set_result, job.future, result)

    def _fail_rest(self) -> None:
        for job in self._take(block=False):
            if job is not None:
                error = EngineStoppedError("the model was unloaded before the request ran")
                job.loop.call_soon_threadsafe(set_exception, job.future, error)


def set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():  # the caller may have gone (cancelled)
        future.set_result(value)


def set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
