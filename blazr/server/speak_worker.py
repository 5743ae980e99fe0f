"""SpeakWorker: a text-to-speech voice's own thread, which speaks concurrent requests a sentence at a time.

The server's counterpart of TranscribeWorker for speech synthesis: each request becomes the voice's sentence
iterator (Synthesizer.stream) on this thread, and every round speaks the next sentence of every active request
in turn, handing each sentence's audio to the request's callback (on this thread: it encodes and posts the
bytes to the event loop). A request that arrives mid-way joins at the next round, so a long text does not hold
up a short one queued behind it; one whose client left (its future cancelled) is dropped before its next
sentence; one that fails (text espeak cannot read, a fault in the network) ends alone. `run(fn)` runs other
work on the same thread between rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.engine.async_engine import EngineStoppedError
from blazr.server.model_worker import ModelWorker, set_exception, set_result


@dataclass
class SpeechStats:
    """What one request spoke: `usage` of OpenAI's speech.audio.done event comes from it."""

    sentences: int = 0
    phoneme_ids: int = 0  # the network's input ids, over every sentence
    samples: int = 0  # audio samples at the voice's rate


@dataclass
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    text: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # voice, speed (Synthesizer.stream)
    on_sentence: Callable[[str, np.ndarray], None] | None = None
    fn: Callable[[], Any] | None = None  # or a call
    stats: SpeechStats = field(default_factory=SpeechStats)


class SpeakWorker(ModelWorker):
    THREAD_NAME = "blazr-speak"

    def __init__(self, synthesizer: Any):
        self.synthesizer = synthesizer
        super().__init__()

    async def speak(
        self, text: str, on_sentence: Callable[[str, np.ndarray], None], **options: Any
    ) -> SpeechStats:
        """Speak `text` sentence by sentence: `on_sentence(phonemes, audio)` runs on the worker thread for
        each, in order; the result counts what was spoken. Errors (InputError for nothing to speak, ...) are
        raised here."""
        job = _Job(asyncio.get_running_loop(), self._future(), text, options, on_sentence)
        return await self._submit(job)

    def _call_job(self, fn: Callable[[], Any]) -> _Job:
        return _Job(asyncio.get_running_loop(), self._future(), fn=fn)

    # ---- worker thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        active: list[tuple[Iterator[tuple[str, np.ndarray]], _Job]] = []
        while True:
            jobs = self._take(block=not active)
            if None in jobs or self._stopped:
                break
            for job in jobs:
                if job.fn is not None:
                    self._settle(job, job.fn)
                else:
                    active.append((self.synthesizer.stream(job.text, **job.options), job))
            active = [(sentences, job) for sentences, job in active if self._step(sentences, job)]
        for _, job in active:
            job.loop.call_soon_threadsafe(
                set_exception, job.future, EngineStoppedError("the model was unloaded")
            )
        self._fail_rest()

    def _step(self, sentences: Iterator[tuple[str, np.ndarray]], job: _Job) -> bool:
        """Speak the job's next sentence; False once it is finished, failed or abandoned."""
        if job.future.done():  # cancelled: the client went away
            return False
        try:
            phonemes, audio = next(sentences)
            job.stats.sentences += 1
            job.stats.phoneme_ids += len(self.synthesizer.ids(phonemes))
            job.stats.samples += len(audio)
            job.on_sentence(phonemes, audio)
        except StopIteration:
            job.loop.call_soon_threadsafe(set_result, job.future, job.stats)
            return False
        except Exception as error:  # this request only: the others go on
            job.loop.call_soon_threadsafe(set_exception, job.future, error)
            return False
        return True
