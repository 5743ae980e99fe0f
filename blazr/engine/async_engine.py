"""AsyncEngine: runs an Engine's step loop on its own thread and streams outputs to asyncio callers.

Calls from the event loop never touch the Engine directly: they queue commands that the engine thread applies
between steps, and outputs come back through each request's asyncio.Queue via call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from blazr.engine.engine import Engine
from blazr.engine.request import RequestOutput, SamplingParams
from blazr.errors import BlazrError, ConfigError


class EngineStoppedError(BlazrError):
    """The engine thread was shut down while a request was still running."""


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue  # RequestOutput items, or an exception that ends the stream


class AsyncEngine:
    """Thread-backed front end: `generate()` streams one request; many may run at once."""

    def __init__(self, engine: Engine):
        self.engine = engine
        # ("add", id, ids, params) | ("abort", id) | ("call", fn, future)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()  # guards _streams (event loop thread vs engine thread)
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="blazr-engine", daemon=True)
        self._thread.start()

    # ---- caller side (event loop) ------------------------------------------------------------------------

    def add_request(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> asyncio.Queue:
        """Queue a request; returns the asyncio.Queue its outputs arrive on. Must run inside an event loop.
        Raises ConfigError at once for bad params, a prompt over the context limit or a reused id."""
        params = params if params is not None else SamplingParams()
        prompt_ids = [int(t) for t in prompt_ids]
        self.engine.check_request(prompt_ids, params)
        if self._stopped:
            raise EngineStoppedError("the engine has been shut down")
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            if request_id in self._streams:
                raise ConfigError(f"request id {request_id!r} is already in use")
            self._streams[request_id] = stream
        self._send(("add", request_id, prompt_ids, params))
        return stream.queue

    def abort(self, request_id: str) -> None:
        """Stop a request; its blocks are freed before the next step. Unknown ids are ignored."""
        self._send(("abort", request_id))

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Stream a request's outputs. If the consumer stops early (break + aclose, or task cancel), the
        request is aborted so its KV blocks go back to the pool. With params.n > 1 the outputs of all choices
        interleave (RequestOutput.index) and the stream ends when every choice has finished."""
        request_id = request_id or uuid.uuid4().hex
        outputs = self.add_request(request_id, prompt_ids, params)
        unfinished = params.n if params is not None else 1
        finished = False
        try:
            while not finished:
                item = await outputs.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                unfinished -= item.finished
                finished = unfinished == 0
                yield item
        finally:
            if not finished:
                self.abort(request_id)
            with self._lock:
                self._streams.pop(request_id, None)

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn()` on the engine thread between two steps and return its result (or raise its error).
        For work that must not overlap a step on the same model and backend, e.g. an embedding forward."""
        if self._stopped:
            raise EngineStoppedError("the engine has been shut down")
        future = asyncio.get_running_loop().create_future()
        self._send(("call", fn, future))
        return await future

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Stop the engine thread; requests still running end with EngineStoppedError."""
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout)

    def _send(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    # ---- engine thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped:
            self._apply_commands()
            if not self.engine.has_unfinished():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                outputs = self.engine.step()
            except Exception as error:  # a failed step ends every request with the error
                self._fail_all(error)
                continue
            for output in outputs:
                self._deliver(output.request_id, output)
        self._fail_all(EngineStoppedError("the engine was shut down before the request finished"))
        self._fail_calls()

    def _fail_calls(self) -> None:
        """Settle `run()` calls still queued at shutdown, so no caller waits forever."""
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command[0] == "call":
                self._call(_raise_stopped, command[2])

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command[0] == "abort":
                self.engine.abort(command[1])
                continue
            if command[0] == "call":
                self._call(command[1], command[2])
                continue
            _, request_id, prompt_ids, params = command
            try:
                self.engine.add_request(request_id, prompt_ids, params)
            except Exception as error:  # any failure ends that request only: the engine thread must live on
                self._deliver(request_id, error)

    @staticmethod
    def _call(fn: Callable[[], Any], future: asyncio.Future) -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (fn(), None)
        except Exception as error:  # handed to the caller, who awaits run()
            outcome = (None, error)
        try:
            future.get_loop().call_soon_threadsafe(_settle, future, *outcome)
        except RuntimeError:
            pass  # the caller's event loop is closed

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            ids = list(self._streams)
        for request_id in ids:
            self.engine.abort(request_id)
            self._deliver(request_id, error)

    def _deliver(self, request_id: str, item: RequestOutput | BaseException) -> None:
        with self._lock:
            stream = self._streams.get(request_id)
        if stream is None:
            return  # the consumer is gone
        try:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
        except RuntimeError:
            pass  # the consumer's event loop is closed


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller was cancelled
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _raise_stopped() -> None:
    raise EngineStoppedError("the engine was shut down before the call ran")
