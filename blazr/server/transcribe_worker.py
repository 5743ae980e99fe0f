"""TranscribeWorker: a Whisper model's own thread, which decodes concurrent requests' windows together.

The server's counterpart of AsyncEngine for speech recognition: each request becomes a TranscriptionRun
(blazr.tasks.transcribe_run) on this thread, and every round decodes the pending 30 s window of every active
run in one batch (Transcriber.run_batch with one round). A request that arrives mid-way joins at the next
round, one that finishes leaves, so a long recording does not hold up a short one queued behind it. A run
that fails (bad input found late, a client gone) ends alone; the others go on. `run(fn)` runs other work on
the same thread between rounds.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.engine.async_engine import EngineStoppedError
from blazr.server.embed_worker import _set_exception, _set_result


@dataclass
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    audio: np.ndarray | None = None  # a transcription's 16 kHz samples
    options: dict[str, Any] = field(default_factory=dict)
    fn: Callable[[], Any] | None = None  # or a call


class TranscribeWorker:
    def __init__(self, transcriber: Any):
        self.transcriber = transcriber
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="blazr-transcribe", daemon=True)
        self._thread.start()

    async def transcribe(self, audio: np.ndarray, **options: Any) -> Any:
        """The Transcript of `audio` (options: blazr.tasks.transcribe_run.RunOptions); its callbacks run on
        the worker thread."""
        return await self._submit(
            _Job(asyncio.get_running_loop(), self._future(), audio=audio, options=options)
        )

    async def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on the worker thread, between rounds; its result or its error."""
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
        active: list[tuple[Any, _Job]] = []  # (run, its job)
        while True:
            jobs = self._take(block=not active)
            if None in jobs or self._stopped:
                break
            for job in jobs:
                if job.fn is not None:
                    self._settle(job, job.fn)
                    continue
                try:
                    active.append((self.transcriber.start(job.audio, **job.options), job))
                except Exception as error:  # bad options, a language the model lacks: this request only
                    job.loop.call_soon_threadsafe(_set_exception, job.future, error)
            if active:
                try:
                    self.transcriber.run_batch([run for run, _ in active], rounds=1)
                except Exception as error:  # never the worker: the round's requests fail, later ones run
                    for run, _ in active:
                        run.error = run.error or error
                active = [(run, job) for run, job in active if not self._settle_run(run, job)]
        for _, job in active:
            job.loop.call_soon_threadsafe(
                _set_exception, job.future, EngineStoppedError("the model was unloaded")
            )
        self._fail_rest()

    def _take(self, block: bool) -> list[_Job | None]:
        out = [self._jobs.get()] if block else []
        while True:
            try:
                out.append(self._jobs.get_nowait())
            except queue.Empty:
                return out

    @staticmethod
    def _settle_run(run: Any, job: _Job) -> bool:
        """Hand a finished (or failed) run's outcome to its request; False while it still runs."""
        if run.error is not None:
            job.loop.call_soon_threadsafe(_set_exception, job.future, run.error)
            return True
        if run.done:
            job.loop.call_soon_threadsafe(_set_result, job.future, run.transcript())
            return True
        return False

    @staticmethod
    def _settle(job: _Job, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except Exception as error:
            job.loop.call_soon_threadsafe(_set_exception, job.future, error)
            return
        job.loop.call_soon_threadsafe(_set_result, job.future, result)

    def _fail_rest(self) -> None:
        for job in self._take(block=False):
            if job is not None:
                error = EngineStoppedError("the model was unloaded before the request ran")
                job.loop.call_soon_threadsafe(_set_exception, job.future, error)
