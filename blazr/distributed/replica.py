"""EngineReplica: one copy of a text model and its engine, living in a Ray actor process on some node.

The leader talks to it through three calls: `submit` starts a request, `abort` stops one, and `outputs` is one
long streaming call per leader that carries every request's outputs back, batched: whatever the engine's steps
produced since the last batch, as [(request_id, RequestOutput or the error that ended it)]. One streamed
object per engine step instead of one per token and request keeps Ray's per-object cost (~1 ms of CPU on
this machine's cores, which the engine also needs) from growing with the number of streams.

Ray runs the methods on the actor's event loop (an async actor); the engine steps on its own thread
(AsyncEngine), so many requests run as one continuous batch. A pipeline's replica runs one engine per machine
("lanes", blazr.distributed.pipeline): a request goes to the lane with the fewest requests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from blazr.config import Settings
from blazr.engine.request import SamplingParams
from blazr.errors import ConfigError, ModelNotFoundError, UnsupportedError

log = logging.getLogger("blazr.swarm")


class EngineReplica:
    """Wrapped by ray.remote in replica_set.py; `__init__` loads the model (Ray reruns it on a restart), whole or,
    with `stages` > 1, as stage 0 of a pipeline whose other stages take `cpus` CPUs each in the other bundles
    of placement `group` (one node each)."""

    def __init__(
        self,
        model_path: str,
        settings: Settings,
        stages: int = 1,
        cpus: int = 1,
        group: Any = None,
        lanes: int | None = None,
    ):
        self._requests: dict[
            str, asyncio.Task
        ] = {}  # request id -> the task moving its outputs to the outbox
        self._outbox: list[tuple[str, Any]] = []
        self._posted: asyncio.Event | None = None  # made on the actor's event loop
        self._warm: asyncio.Task | None = None
        self._load_error: Exception | None = None
        try:
            self._load(Path(model_path), settings, stages, cpus, group, lanes)
        except Exception as error:  # kept for `ready` to raise: an actor dying in __init__ loses the error
            self._load_error = error

    def _load(
        self, path: Path, settings: Settings, stages: int, cpus: int, group: Any, lanes: int | None
    ) -> None:
        from blazr.engine.async_engine import AsyncEngine
        from blazr.server.model_loading import load_for_serving

        if not path.exists():
            raise ModelNotFoundError(
                f"the model {path} is not on node {socket.gethostname()}: put it at the same path on every machine"
            )
        if stages > 1:  # this process holds stage 0; Ray places the others (blazr.distributed.pipeline)
            import ray

            from blazr.distributed.pipeline import load_pipeline

            self.lanes = load_pipeline(ray, str(path), settings, stages, cpus, group, lanes)
        else:
            self.lanes = [load_for_serving(path, settings)]
        self.llm = self.lanes[0]  # what the single-engine calls (prefill, hand-off slots) use
        if self.llm.task != "generate":
            raise UnsupportedError(f"{path} is not a text generation model; a swarm serves those")
        self.engines = [AsyncEngine(llm.engine) for llm in self.lanes]
        self.engine = self.engines[0]
        self._lane_of: dict[str, int] = {}  # request id -> the lane running it
        self._served = [0] * len(self.lanes)  # requests each lane has taken

    async def ready(self) -> dict[str, Any]:
        """Warm the kernels once (numba compiles on first use), then describe this replica."""
        from blazr.server.state import warm_up

        if self._load_error is not None:
            raise self._load_error
        if self._warm is None:
            self._warm = asyncio.ensure_future(self._warm_lanes(warm_up))
        await self._warm
        engine = self.llm.engine
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "backend": self.llm.backend.name,
            "num_ctx": engine.num_ctx,
            "vocab_size": engine.vocab_size,
            "block_size": engine.pool.block_size,
            "stages": getattr(self.llm.model, "stage_info", []),  # a pipeline's later stages
            "lanes": len(self.lanes),
        }

    async def _warm_lanes(self, warm_up) -> None:
        """Each lane on its own engine's thread (numba's OpenMP pool is per thread), one after the other."""
        for llm, engine in zip(self.lanes, self.engines, strict=True):
            await engine.run(lambda llm=llm: warm_up(llm))

    async def submit(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams, kv: dict | None = None
    ) -> float:
        """Start a request; its outputs (or its error) arrive through `outputs`. `kv`: the prompt's KV rows from
        a prefill replica (`prefill`), loaded into the prefix cache first so only the prompt's last partial
        block is computed here. Returns the seconds loading `kv` took."""
        start = time.perf_counter()
        handed = kv is not None
        if handed:
            slot, slots = handoff_slot(request_id), self.llm.engine.slots
            try:
                await self.engine.run(lambda: slots.load(slot, kv))
            except ConfigError as error:  # no room for the rows now: compute the prompt here instead
                log.warning("request %s: the handed-over KV rows were not loaded (%s)", request_id, error)
                await self.engine.run(lambda: slots.remove(slot) if slot in slots.slots else None)
                handed = False
        loaded = time.perf_counter() - start
        lane = 0 if handed else self._pick_lane(prompt_ids)
        self._lane_of[request_id] = lane
        self._served[lane] += 1
        task = asyncio.ensure_future(self._pump(request_id, prompt_ids, params, handed, lane))
        self._requests[request_id] = task
        return loaded

    async def prefill(self, request_id: str, prompt_ids: list[int]) -> tuple[dict[str, Any], dict]:
        """Compute the prompt's KV and return (timings, its rows): whole blocks as SlotStore.export gives them,
        freed here; what a decode replica's `submit` takes. Called with num_returns=2: the leader awaits the
        small first object and passes the second's reference on, so the rows go from this node's object store
        to the decode replica's node directly (within one node, mapped without a copy)."""
        slot = handoff_slot(request_id)
        prompt_only = SamplingParams(max_tokens=1, temperature=0.0, slot_id=slot)  # the one token is dropped
        start = time.perf_counter()
        async for _ in self.engine.generate(prompt_ids, prompt_only, request_id=request_id):
            pass
        computed = time.perf_counter()
        engine = self.llm.engine
        try:
            rows = await self.engine.run(lambda: engine.slots.export(slot))
        finally:
            await self.engine.run(lambda: engine.slots.remove(slot))
        timings = {"tokens": len(rows["token_ids"]), "prefill_s": computed - start}
        timings["export_s"] = time.perf_counter() - computed
        timings["bytes"] = sum(array.nbytes for array in rows.values())
        return timings, rows

    async def abort(self, request_id: str) -> None:
        """Stop a request (its client left): the engine frees its KV blocks. Unknown ids are ignored."""
        task = self._requests.pop(request_id, None)
        if task is not None:
            task.cancel()

    async def outputs(self) -> AsyncIterator[list[tuple[str, Any]]]:
        """Every request's outputs, a batch per wake-up, until the leader cancels the call."""
        if self._posted is None:
            self._posted = asyncio.Event()
        while True:
            await self._posted.wait()
            await asyncio.sleep(0)  # let the other requests' outputs of the same engine step be posted too
            self._posted.clear()
            batch, self._outbox = self._outbox, []
            yield batch

    def counts(self) -> dict[str, int]:
        """Running and waiting sequences, KV blocks (the leader's /metrics) and slots (hand-offs in flight)."""
        from blazr.server.metrics import engine_counts

        counts = [engine_counts(llm.engine) for llm in self.lanes]
        return {key: sum(c[key] for c in counts) for key in counts[0]} | {
            "slots": len(self.llm.engine.slots.slots)
        }

    def lanes_served(self) -> list[int]:
        """Requests each lane has taken since the replica started."""
        return list(self._served)

    def _in_flight_per_lane(self) -> list[int]:
        """Requests in flight on each lane."""
        held = [0] * len(self.lanes)
        for lane in self._lane_of.values():
            held[lane] += 1
        return held

    def _pick_lane(self, prompt_ids: list[int]) -> int:
        """The lane with the fewest requests; among equals the one the prompt's first tokens hash to, so a
        repeated prompt tends to find its blocks in that lane's prefix cache."""
        held = self._in_flight_per_lane()
        fewest = [lane for lane, n in enumerate(held) if n == min(held)]
        return fewest[hash(tuple(prompt_ids[:16])) % len(fewest)]

    async def _pump(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams, handed: bool, lane: int
    ) -> None:
        try:
            async for output in self.engines[lane].generate(prompt_ids, params, request_id=request_id):
                self._post(request_id, output)
        except asyncio.CancelledError:
            pass  # aborted: generate's clean-up aborted the engine request
        except Exception as error:  # ends this request only; the leader raises it to its client
            self._post(request_id, error)
        finally:
            self._requests.pop(request_id, None)
            self._lane_of.pop(request_id, None)
            if handed:  # the handed-over blocks stay cached like any finished prompt's, no longer pinned
                slots = self.llm.engine.slots
                await self.engine.run(lambda: slots.remove(handoff_slot(request_id)))

    def _post(self, request_id: str, item: Any) -> None:
        self._outbox.append((request_id, item))
        if self._posted is None:
            self._posted = asyncio.Event()
        self._posted.set()


def handoff_slot(request_id: str) -> str:
    """The slot holding a request's prompt KV while it moves from a prefill replica to a decode replica."""
    return f"handoff:{request_id}"
