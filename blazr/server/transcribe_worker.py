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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.engine.async_engine import EngineStoppedError
from blazr.server.model_worker import ModelWorker, set_exception, set_result


@dataclass
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    audio: np.ndarray | None = None  # a transcription's 16 kHz samples
    options: dict[str, Any] = field(default_factory=dict)
    fn: Callable[[], Any] | None = None  # or a call


class TranscribeWorker(ModelWorker):
    THREAD_NAME = "blazr-transcribe"

    def __init__(self, transcriber: Any):
        self.transcriber = transcriber
        super().__init__()

    async def transcribe(self, audio: np.ndarray, **options: Any) -> Any:
        """The Transcript of `audio` (options: blazr.tasks.transcribe_run.RunOptions); its callbacks run on
        the worker thread."""
        return await self._submit(
            _Job(asyncio.get_running_loop(), self._future(), audio=audio, options=options)
        )

    def _call_job(self, fn: Callable[[], Any]) -> _Job:
        return _Job(asyncio.get_running_loop(), self._future(), fn=fn)

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
                    job.loop.call_soon_threadsafe(set_exception, job.future, error)
            if active:
                try:
                    self.transcriber.run_batch([run for run, _ in active], rounds=1)
                except Exception as error:  # never the worker: the round's requests fail, later ones run
                    for run, _ in active:
                        run.error = run.error or error
                active = [(run, job) for run, job in active if not self._settle_run(run, job)]
        for _, job in active:
            job.loop.call_soon_threadsafe(
                set_exception, job.future, EngineStoppedError("the model was unloaded")
            )
        self._fail_rest()

    @staticmethod
    def _settle_run(run: Any, job: _Job) -> bool:
        """Hand a finished (or failed) run's outcome to its request; False while it still runs."""
        if run.error is not None:
            job.loop.call_soon_threadsafe(set_exception, job.future, run.error)
            return True
        if run.done:
            job.loop.call_soon_threadsafe(set_result, job.future, run.transcript())
            return True
        return False
