"""ReplicaSet: the swarm leader's engine for one model, AsyncEngine's interface over N EngineReplica actors.

`generate` picks a replica with the PrefixRouter, submits the request there and reads its outputs from a
queue that the replica's reader fills: one task per replica consumes that replica's `outputs` stream (all its
requests' outputs, a batch per engine step) and hands each output to its request's queue. A replica whose process or
node goes away fails the requests it was streaming with UnavailableError (HTTP 503, or an error event on a
stream already started); a request that had received nothing yet is sent to another replica instead. The
lost replica is taken out of routing until Ray has restarted it (max_restarts=-1: Ray recreates the actor,
reloading the model, on a node with room) and it answers `ready` again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from blazr.config import Settings
from blazr.distributed.pipeline import stage_env
from blazr.distributed.prefix_router import PrefixRouter
from blazr.distributed.replica import EngineReplica
from blazr.engine.request import RequestOutput, SamplingParams
from blazr.errors import ConfigError, UnavailableError, UnsupportedError

if TYPE_CHECKING:
    from blazr.distributed.prefill_pool import PrefillPool

log = logging.getLogger("blazr.swarm")
READY_TIMEOUT_S = 600.0  # loading and warming a model on a worker that is still joining
RESTART_POLL_S = 1.0


class ActorGroup:
    """N EngineReplica actors of one model, placed by Ray on nodes with `cpus_per_replica` free CPUs (and
    `resource`, a label only some nodes advertise: disaggregated serving's prefill and decode nodes), with
    the liveness the leader tracks: `live[i]`, requests `in_flight[i]`, and `info[i]` from `ready`."""

    role = "replica"

    def __init__(
        self,
        ray: ModuleType,
        model_path: str,
        settings: Settings,
        replicas: int,
        cpus_per_replica: int,
        resource: str | None = None,
        stages: int = 1,
        lanes: int | None = None,
    ):
        if replicas < 1 or cpus_per_replica < 1:
            raise ConfigError(
                f"{self.role}s and their CPUs must be at least 1 (got {replicas} x {cpus_per_replica})"
            )
        self.ray = ray
        self.model_path = model_path
        remote = ray.remote(EngineReplica)
        options = {
            "num_cpus": cpus_per_replica,
            "resources": {resource: 1} if resource else None,
            "max_restarts": -1,  # Ray recreates a replica whose process or node died
            "max_task_retries": 0,  # a generation is not replayed: its stream already went to the client
            "max_concurrency": 1024,  # requests stream side by side; the engine batches them
            # stage 0 of a pipeline idles while the later stages compute (pipeline.stage_env)
            "runtime_env": {
                "env_vars": stage_env(cpus_per_replica)
                if stages > 1
                else {"NUMBA_NUM_THREADS": str(cpus_per_replica)}
            },
        }
        self.groups: list[Any] = []  # a pipeline replica's placement group: one bundle, one node, per stage
        self.handles = []
        for _ in range(replicas):
            if stages == 1:  # SPREAD: one replica per node while nodes have room
                self.handles.append(
                    remote.options(**options, scheduling_strategy="SPREAD").remote(model_path, settings)
                )
                continue
            group, on_bundle = stage_placement(ray, stages, cpus_per_replica)
            self.groups.append(group)
            handle = remote.options(**options, scheduling_strategy=on_bundle(0))
            args = (model_path, settings, stages, cpus_per_replica, group, lanes)
            self.handles.append(handle.remote(*args))
        self.live = [False] * replicas
        self.in_flight = [0] * replicas
        self.info: list[dict[str, Any] | None] = [None] * replicas
        self._restarts: dict[int, asyncio.Task] = {}
        self._stopped = False

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Wait until every replica has loaded and warmed its model (blocking: the server runs it in a
        thread); the first one's description."""
        refs = [handle.ready.remote() for handle in self.handles]
        _, pending = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if pending:
            self.shutdown()
            raise UnavailableError(
                f"{len(pending)} of {len(refs)} {self.role}s of {self.model_path} did not start within "
                f"{timeout:.0f} s: the cluster has too few free CPUs for them ({self.placement_hint})"
            )
        for i, ref in enumerate(refs):
            try:
                self.info[i] = self.ray.get(ref)
            except self.ray.exceptions.RayError as error:
                self.shutdown()
                raise unwrap_ray_error(error) from None
            self.live[i] = True
        return self.info[0]

    placement_hint = "add workers, or lower --replicas or --cpus-per-replica"

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Kill the actors and free their placement groups; safe to call twice (a failed load, then the
        server's clean-up)."""
        self._stopped = True
        for task in self._restarts.values():
            task.cancel()
        for handle in self.handles:
            self.ray.kill(handle, no_restart=True)
        groups, self.groups = self.groups, []
        if groups:
            from ray.util.placement_group import remove_placement_group

            for group in groups:
                remove_placement_group(group)

    def _lost(self, replica: int) -> None:
        """Take a replica out of use and wait for Ray to restart it."""
        if not self.live[replica] or self._stopped:
            return
        self.live[replica] = False
        log.warning(
            "%s %d of %s was lost; waiting for Ray to restart it", self.role, replica, self.model_path
        )
        self._restarts[replica] = asyncio.ensure_future(self._await_restart(replica))

    async def _await_restart(self, replica: int) -> None:
        """Back into use once the restarted actor has loaded and warmed its model."""
        while not self._stopped:
            try:
                self.info[replica] = await self.handles[replica].ready.remote()
            except self.ray.exceptions.RayActorError:
                await asyncio.sleep(RESTART_POLL_S)  # still dead or restarting
                continue
            except self.ray.exceptions.RayTaskError as error:  # the restarted actor failed to load
                log.error(
                    "%s %d of %s failed to restart: %s",
                    self.role,
                    replica,
                    self.model_path,
                    unwrap_ray_error(error),
                )
                return
            self._back(replica)
            self.live[replica] = True
            self._restarts.pop(replica, None)
            log.info("%s %d of %s is back", self.role, replica, self.model_path)
            return

    def _back(self, replica: int) -> None:
        """A restarted replica is about to take requests again."""


class ReplicaSet(ActorGroup):
    """The leader's engine: whole requests on replicas, or with `prefill` (disaggregated serving) the
    prompt's KV computed on a prefill replica and decoding on one of these."""

    def __init__(
        self,
        ray: ModuleType,
        model_path: str,
        settings: Settings,
        replicas: int,
        cpus_per_replica: int,
        resource: str | None = None,
        prefill: PrefillPool | None = None,
        stages: int = 1,
        lanes: int | None = None,
    ):
        super().__init__(ray, model_path, settings, replicas, cpus_per_replica, resource, stages, lanes)
        self.prefill = prefill
        self.router = PrefixRouter(replicas)
        self._readers: dict[int, asyncio.Task] = {}  # replica -> the task reading its outputs stream
        self._queues: list[dict[str, asyncio.Queue]] = [{} for _ in range(replicas)]  # request id -> outputs

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        if self.prefill is not None:
            self.prefill.wait_ready(timeout)
        info = super().wait_ready(timeout)
        self.router = PrefixRouter(len(self.handles), block_size=info["block_size"])
        return info

    # ---- AsyncEngine's interface -------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        params = params if params is not None else SamplingParams()
        if params.slot_id is not None:
            raise UnsupportedError(
                "slots keep a conversation's KV cache in one process; a swarm's replicas do not share them"
            )
        request_id = request_id or uuid.uuid4().hex
        tried: set[int] = set()
        while True:
            live = [up and i not in tried for i, up in enumerate(self.live)]
            replica = self.router.pick(prompt_ids, self.in_flight, live)
            if replica is None:
                raise UnavailableError(
                    f"no replica of {self.model_path} is running (they are restarting); retry shortly"
                )
            tried.add(replica)
            try:
                async for output in self._stream(replica, prompt_ids, params, request_id):
                    yield output
                return
            except _LostBeforeStart:
                continue  # nothing reached the client yet: another replica serves it

    async def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on a leader thread (the server's warm-up and load hooks): the replicas run the model work."""
        return await asyncio.to_thread(fn)

    def abort(self, request_id: str) -> None:
        """Requests end when their stream is closed (generate's caller stops reading)."""

    def shutdown(self, timeout: float | None = 5.0) -> None:
        for task in self._readers.values():
            task.cancel()
        super().shutdown(timeout)
        if self.prefill is not None:
            self.prefill.shutdown(timeout)

    async def counts(self) -> dict[str, int]:
        """The live replicas' engine counts, summed (the leader's /metrics)."""
        live = [handle.counts.remote() for handle, up in zip(self.handles, self.live, strict=True) if up]
        total = {"running": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 0}
        for counts in await asyncio.gather(*live, return_exceptions=True):
            if isinstance(counts, dict):  # a replica lost since: left out until it is back
                for key in total:
                    total[key] += counts[key]
        if self.prefill is not None:
            total["handoff_tokens"] = self.prefill.handed_tokens
            total["handoff_seconds"] = self.prefill.export_seconds + self.prefill.load_seconds
        return total

    # ---- streaming and failure ---------------------------------------------------------------------------

    async def _stream(
        self, replica: int, prompt_ids: list[int], params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """A replica's outputs for one request. Lost before the first one: _LostBeforeStart; after:
        UnavailableError."""
        self._ensure_reader(replica)
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[replica][request_id] = queue
        self.router.record(replica, prompt_ids)
        self.in_flight[replica] += 1
        unfinished, started = params.n, False
        try:
            # disaggregated: the prompt's KV rows, as a reference into Ray's object store (never fetched here)
            kv = await self.prefill.kv_rows(request_id, prompt_ids) if self.prefill is not None else None
            try:
                loaded = await self.handles[replica].submit.remote(request_id, prompt_ids, params, kv)
                if self.prefill is not None:
                    self.prefill.load_seconds += loaded
            except self.ray.exceptions.RayActorError:
                self._lost(replica)
            except self.ray.exceptions.RayTaskError as error:
                raise unwrap_ray_error(error) from None
            while unfinished:
                item = await queue.get()
                if item is _LOST:
                    if not started:
                        raise _LostBeforeStart
                    raise UnavailableError(
                        f"replica {replica} of {self.model_path} went away during the request (its process or "
                        "node stopped); it is restarting and the other replicas serve new requests: retry"
                    )
                if isinstance(item, BaseException):
                    raise item
                started = True
                unfinished -= item.finished
                yield item
        finally:
            self.in_flight[replica] -= 1
            self._queues[replica].pop(request_id, None)
            if unfinished and self.live[replica]:  # the caller stopped reading: free the replica's blocks
                self.handles[replica].abort.remote(request_id)

    def _ensure_reader(self, replica: int) -> None:
        if replica not in self._readers:
            self._readers[replica] = asyncio.ensure_future(self._read(replica))

    async def _read(self, replica: int) -> None:
        """Hand each output the replica sends to its request's queue, until the replica is lost."""
        ray = self.ray
        stream = self.handles[replica].outputs.remote()
        try:
            async for ref in stream:
                for request_id, item in await ref:
                    queue = self._queues[replica].get(request_id)
                    if queue is not None:  # else the client left and its abort is on the way
                        queue.put_nowait(item)
        except ray.exceptions.RayActorError:
            if self._readers.get(replica) is asyncio.current_task():  # not a reader replaced after a restart
                del self._readers[replica]
                self._lost(replica)
        except asyncio.CancelledError:
            ray.cancel(stream)
            raise

    def _lost(self, replica: int) -> None:
        """Also end the requests it was serving and forget what it cached."""
        for queue in self._queues[replica].values():
            queue.put_nowait(_LOST)
        if self.live[replica]:
            self.router.forget(replica)
        super()._lost(replica)

    def _back(self, replica: int) -> None:
        stale = self._readers.pop(replica, None)  # the dead actor's reader, if it has not ended yet
        if stale is not None:
            stale.cancel()
        self._ensure_reader(replica)


_LOST = object()  # put in a request's queue when its replica went away


def stage_placement(ray: ModuleType, stages: int, cpus: int):
    """(a placement group of `stages` bundles of `cpus` CPUs on as many distinct nodes, bundle i's
    scheduling strategy): the pipeline's stages, each on its own machine."""
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([{"CPU": cpus}] * stages, strategy="STRICT_SPREAD")

    def on_bundle(index: int):
        return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)

    return group, on_bundle


class _LostBeforeStart(Exception):
    """The replica went away before its first output: the request can go elsewhere unseen."""


def unwrap_ray_error(error: Exception) -> Exception:
    """The exception raised inside the actor, from Ray's wrapper (RayTaskError, or an actor that died in
    __init__ with its creation error)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception):
        return unwrap_ray_error(cause)
    return error
