"""Pipeline parallelism: one replica's layers split over several machines, for a model too big for one.

The replica's own process (an EngineReplica) holds stage 0 (the embeddings and the first layers) and runs the
engines: scheduler, KV block tables, sampling. Its model is a PipelinedModel: each forward pass runs stage 0
here, then sends the batch's description and hidden states (T, D) down the chain of StageWorker actors on the
other machines, each holding its layers and their KV cache (same block layout, same block tables); the last
returns the logits (R, V). The hidden states go from stage to stage as Ray object references, so a later
stage starts as soon as the one before it is done, without a round trip through stage 0.

Micro-batches: a replica whose S stages run on S machines runs S engines ("lanes", as vLLM's virtual
engines), each with its own scheduler, share of the sequences and KV pool, over the same stages. While lane
0's batch is in the later stages, lane 1 runs stage 0 on its own batch, so every stage has work while the
others do theirs, and Ray's hop between stages hides behind another lane's computing. Cutting one engine's
batch into micro-batches instead leaves the stages idle at each step's start and end (the next step needs
all of this one's logits); lanes have no such gap. Either way each stage reads its weights once per batch it
runs, twice as often with two lanes: on separate machines the stages do that at the same time, but stages
sharing one machine's cores only add the passes up, so they get one lane by default (default_lanes). A
lane's batch passes each stage in turn (a stage actor runs one call at a time, in the order they came), each
stage keeping a KV cache per lane.

A stage that dies takes its KV cache with it: the replica then exits, Ray restarts it with fresh stages (the
stage actors share its fate), and the leader treats it as any lost replica.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

import numpy as np

from blazr.config import Settings
from blazr.models.batch import ForwardBatch

log = logging.getLogger("blazr.swarm")

# libgomp (numba's OpenMP pool) keeps a finished parallel region's threads spinning for GOMP_SPINCOUNT turns
# (300,000 by default) before they sleep, so back-to-back kernels start without a wake-up. A pipeline stage
# finishes its layers and then idles while the others compute: with the default, its threads spun for
# milliseconds on cores the next stage needed when stages share a machine (SmolLM2, two stages on one 2-core
# machine: 34.5 ms a token; 18.7 ms at 20,000; docs/performance.md). 20,000 turns still bridge the gaps
# between one forward pass's kernels. A value in the environment wins.
STAGE_SPINCOUNT = "20000"
BLOCK_SIZE = 16  # the lanes' KV block size, given to each Engine and to the pool's sizing alike


def stage_env(cpus: int) -> dict[str, str]:
    """Environment of a pipeline stage's process (stage 0's replica and each StageWorker)."""
    return {
        "NUMBA_NUM_THREADS": str(cpus),
        "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT", STAGE_SPINCOUNT),
    }


class StageWorker:
    """Pipeline stage `index` of `count` of the model at `model_path`; wrapped by ray.remote."""

    def __init__(self, model_path: str, settings: Settings, index: int, count: int):
        from blazr.backends import get_backend
        from blazr.loaders import load_checkpoint
        from blazr.models import build_model

        self.be = get_backend(settings.device)
        self.model = build_model(
            load_checkpoint(model_path), self.be, settings.inference.dtype, stage=(index, count)
        )
        self.caches: dict[int, Any] = {}  # lane -> this stage's KV cache for that lane's engine

    def ready(self) -> dict[str, Any]:
        info = {"pid": os.getpid(), "host": socket.gethostname()}
        return info | {"layers": len(self.model.layers), "first_layer": self.model.layer_offset}

    def make_cache(
        self, num_blocks: int, block_size: int, kv_dtype: str | None = None, lane: int = 0
    ) -> None:
        self.model.kv_dtype = kv_dtype  # as stage 0's (blazr.engine.kv_dtype)
        self.caches[lane] = self.model.make_cache(num_blocks, block_size)

    def forward(self, batch: ForwardBatch, hidden: np.ndarray, lane: int = 0) -> np.ndarray:
        """hidden (T, D) -> this stage's output: hidden (T, D), or the logits (R, V) on the last stage."""
        out = self.model.stage(batch, self.caches[lane], self.be.upload(hidden))
        return np.asarray(self.be.download(out))


class LocalStages:
    """Later stages called in turn in this process (StageWorker objects): a pipeline without machines
    between its stages, as tests/test_decoder_stage.py runs one."""

    def __init__(self, stages: list[StageWorker]):
        self.stages = stages

    def make_cache(self, num_blocks: int, block_size: int, kv_dtype: str | None, lane: int) -> None:
        for stage in self.stages:
            stage.make_cache(num_blocks, block_size, kv_dtype, lane)

    def forward(self, batch: ForwardBatch, hidden: np.ndarray, lane: int) -> np.ndarray:
        for stage in self.stages:
            hidden = stage.forward(batch, hidden, lane)  # (T, D), the last stage's (R, V)
        return hidden


class RemoteStages:
    """Later stages as StageWorker actors, called from an engine's thread."""

    def __init__(self, ray, handles: list):
        self.ray, self.handles = ray, handles

    def make_cache(self, num_blocks: int, block_size: int, kv_dtype: str | None, lane: int) -> None:
        self.ray.get([h.make_cache.remote(num_blocks, block_size, kv_dtype, lane) for h in self.handles])

    def forward(self, batch: ForwardBatch, hidden: np.ndarray, lane: int) -> np.ndarray:
        """Each stage's call takes the previous stage's result as an object reference, and Ray starts it when
        that is ready. Blocks only on the last (with the GIL released, so another lane runs meanwhile)."""
        out: Any = hidden
        for handle in self.handles:
            out = handle.forward.remote(batch, out, lane)
        try:
            return self.ray.get(out)  # (R, V)
        except self.ray.exceptions.RayActorError:
            # its KV cache is gone: the whole replica restarts (Ray recreates it and, with it, its stages)
            log.error("a pipeline stage went away; restarting this replica")
            os._exit(1)


class PipelinedModel:
    """Stage 0 here and the later stages (LocalStages or RemoteStages) after it: what one lane's engine runs
    as its model. `for_lane` gives the other lanes' views of the same stages."""

    stateful = False
    stage_info: list[dict[str, Any]] = []  # what each later stage's `ready` said (its pid, its layers)
    KV_DTYPE_CHOICE = True  # every stage's cache takes the engine's choice (blazr.engine.kv_dtype)
    kv_dtype: str | None = None

    def __init__(self, first: Any, later: Any, lane: int = 0, first_lock: threading.Lock | None = None):
        self.first, self.later, self.lane = first, later, lane
        self.args, self.be, self.dtype = first.args, first.be, first.dtype
        self.layers = first.layers  # stage 0's: what the KV cache's `auto` looks at (packed weights)
        # one lane at a time runs stage 0's layers: two lanes' kernels at once would only split the cores
        # (two OpenMP teams on the same cores wait on each other's barriers)
        self.first_lock = first_lock or threading.Lock()

    def for_lane(self, lane: int) -> PipelinedModel:
        view = PipelinedModel(self.first, self.later, lane, self.first_lock)
        view.stage_info = self.stage_info
        return view

    def make_cache(self, num_blocks: int, block_size: int) -> list:
        """This lane's stage-0 KV cache; each later stage makes its own of the same layout and dtype."""
        self.later.make_cache(num_blocks, block_size, self.kv_dtype, self.lane)
        with self.first_lock:
            self.first.kv_dtype = self.kv_dtype
            return self.first.make_cache(num_blocks, block_size)

    def __call__(self, batch: ForwardBatch, cache: list) -> Any:
        with self.first_lock:
            hidden = np.asarray(self.be.download(self.first.stage(batch, cache, None)))  # (T, D)
        return self.be.upload(self.later.forward(batch, hidden, self.lane))  # (R, V) logits


def load_pipeline(
    ray, model_path: str, settings: Settings, count: int, cpus: int, group: Any, lanes: int | None = None
) -> list:
    """The lanes of a replica whose model runs as `count` stages: `lanes` LLMs (blazr.api), each with its own
    engine over the same stages: stage 0 in this process, stage i on a StageWorker actor of `cpus` CPUs in
    bundle i of placement `group` (each bundle on its own node). `lanes` None: one per machine the stages
    run on (default_lanes)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(model_path)
    backend = get_backend(settings.device)
    first = build_model(checkpoint, backend, settings.inference.dtype, stage=(0, count))
    remote = ray.remote(StageWorker)
    handles = [
        remote.options(
            num_cpus=cpus,
            runtime_env={"env_vars": stage_env(cpus)},
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        ).remote(model_path, settings, index, count)
        for index in range(1, count)
    ]
    stage_info = ray.get([handle.ready.remote() for handle in handles])  # loaded (a load error raises here)
    model = PipelinedModel(first, RemoteStages(ray, handles))
    model.stage_info = stage_info
    return pipeline_lanes(checkpoint, model, backend, settings, lanes=lanes or default_lanes(stage_info))


def default_lanes(stage_info: list[dict[str, Any]]) -> int:
    """One lane per machine the stages run on (this one and the later stages' hosts). Stages on one machine
    share its cores, where a second lane's batch only adds a second pass over every stage's weights (a test
    cluster's nodes on one 2-core machine, SmolLM2, 8 clients: 0.46x of `serve`'s tokens/s with two lanes,
    0.70x with one; each stage on a core of its own: 1.01x with two, 0.73x with one; docs/performance.md)."""
    return len({socket.gethostname()} | {info["host"] for info in stage_info})


def pipeline_lanes(
    checkpoint: Any, model: PipelinedModel, backend: Any, settings: Settings, lanes: int
) -> list:
    """`lanes` LLMs over `model`'s stages, each an engine with its share of the concurrent sequences and of
    the KV budget (together what one engine would have)."""
    from blazr.api import DEFAULT_NUM_CTX, LLM
    from blazr.engine.block_pool import blocks_needed
    from blazr.engine.engine import Engine
    from blazr.engine.kv_dtype import choose_kv_dtype
    from blazr.engine.runner import kv_pool_blocks
    from blazr.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(checkpoint)
    inference = settings.inference
    num_ctx = settings.num_ctx or min(DEFAULT_NUM_CTX, model.args.max_position_embeddings)
    max_seqs = settings.server.max_concurrent_requests
    kv_bytes = inference.kv_cache_mb * 2**20 if inference.kv_cache_mb else None
    # the pool one engine would have (its default budget or --kv-cache-mb) in the dtype the engines will
    # choose, shared out; each lane must still hold one whole context. Measured on stage 0's own model: a
    # lane's make_cache would also remake the later stages' caches.
    choose_kv_dtype(model.first, backend, None)
    blocks = kv_pool_blocks(model.first, num_ctx, BLOCK_SIZE, max_seqs, None, kv_bytes)
    blocks = max(blocks // lanes, blocks_needed(num_ctx, BLOCK_SIZE))
    out = []
    for lane in range(lanes):
        view = model.for_lane(lane)
        engine = Engine(
            view,
            tokenizer,
            backend,
            num_ctx=num_ctx,
            block_size=BLOCK_SIZE,
            max_seqs=-(-max_seqs // lanes),
            num_blocks=blocks,
        )
        out.append(LLM(checkpoint, tokenizer, view, backend, engine, inference.chat_template))
    return out
