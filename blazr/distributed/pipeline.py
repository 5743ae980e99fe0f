"""Pipeline parallelism: one replica's layers split over several machines, for a model too big for one.

The replica's own process (an EngineReplica) holds stage 0 (the embeddings and the first layers) and runs the
engine as usual: scheduler, KV block tables, sampling. Its model is a PipelinedModel: each forward pass runs
stage 0 here, then sends the batch's description and hidden states (T, D) to each later stage in turn, a
StageWorker actor on another machine holding its layers and their KV cache (same block layout, same block
tables), and gets the last stage's logits (R, V) back. One step moves the whole batch through the stages;
stages take turns (no micro-batches overlap yet), so the pipeline adds each stage's transfer to a step and
gains room, not speed.

A stage that dies takes its KV cache with it: the replica then exits, Ray restarts it with fresh stages (the
stage actors share its fate), and the leader treats it as any lost replica.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from blazr.config import Settings
from blazr.models.batch import ForwardBatch

log = logging.getLogger("blazr.swarm")


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
        self.cache: Any = None

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "layers": len(self.model.layers), "first_layer": self.model.layer_offset}

    def make_cache(self, num_blocks: int, block_size: int, kv_dtype: str | None = None) -> None:
        self.model.kv_dtype = kv_dtype  # as stage 0's (blazr.engine.kv_dtype)
        self.cache = self.model.make_cache(num_blocks, block_size)

    def forward(self, batch: ForwardBatch, hidden: np.ndarray) -> np.ndarray:
        """hidden (T, D) -> this stage's output: hidden (T, D), or the logits (R, V) on the last stage."""
        out = self.model.stage(batch, self.cache, self.be.upload(hidden))
        return np.asarray(self.be.download(out))


class RemoteStage:
    """A StageWorker actor, called synchronously from the engine's thread."""

    def __init__(self, ray, handle):
        self.ray, self.handle = ray, handle

    def make_cache(self, num_blocks: int, block_size: int, kv_dtype: str | None = None) -> None:
        self.ray.get(self.handle.make_cache.remote(num_blocks, block_size, kv_dtype))

    def forward(self, batch: ForwardBatch, hidden: np.ndarray) -> np.ndarray:
        try:
            return self.ray.get(self.handle.forward.remote(batch, hidden))
        except self.ray.exceptions.RayActorError:
            # its KV cache is gone: the whole replica restarts (Ray recreates it and, with it, its stages)
            log.error("a pipeline stage went away; restarting this replica")
            os._exit(1)


class PipelinedModel:
    """Stage 0 here and `stages` (objects with make_cache and forward, as StageWorker) after it: what the
    engine runs as its model."""

    stateful = False
    stage_info: list[dict[str, Any]] = []  # what each later stage's `ready` said (its pid, its layers)
    KV_DTYPE_CHOICE = True  # every stage's cache takes the engine's choice (blazr.engine.kv_dtype)
    kv_dtype: str | None = None

    def __init__(self, first: Any, stages: list[Any]):
        self.first, self.stages = first, stages
        self.args, self.be, self.dtype = first.args, first.be, first.dtype
        self.layers = first.layers  # stage 0's: what the KV cache's `auto` looks at (packed weights)

    def make_cache(self, num_blocks: int, block_size: int) -> list:
        """Stage 0's KV cache; each later stage makes its own of the same layout and dtype."""
        for stage in self.stages:
            stage.make_cache(num_blocks, block_size, self.kv_dtype)
        self.first.kv_dtype = self.kv_dtype
        return self.first.make_cache(num_blocks, block_size)

    def __call__(self, batch: ForwardBatch, cache: list) -> Any:
        hidden = np.asarray(self.be.download(self.first.stage(batch, cache, None)))  # (T, D)
        for stage in self.stages:
            hidden = stage.forward(batch, hidden)  # (T, D), the last stage's (R, V)
        return self.be.upload(hidden)  # (R, V) logits


def load_pipeline(ray, model_path: str, settings: Settings, count: int, cpus: int, group: Any) -> Any:
    """An LLM (blazr.api) whose model runs as `count` stages: stage 0 in this process, stage i on a StageWorker
    actor of `cpus` CPUs in bundle i of placement `group` (each bundle on its own node)."""
    from blazr.api import DEFAULT_NUM_CTX, LLM
    from blazr.backends import get_backend
    from blazr.engine.engine import Engine
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.tokenizer import load_tokenizer

    checkpoint = load_checkpoint(model_path)
    backend = get_backend(settings.device)
    first = build_model(checkpoint, backend, settings.inference.dtype, stage=(0, count))
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    remote = ray.remote(StageWorker)
    env = {"env_vars": {"NUMBA_NUM_THREADS": str(cpus)}}
    handles = [
        remote.options(
            num_cpus=cpus,
            runtime_env=env,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        ).remote(model_path, settings, index, count)
        for index in range(1, count)
    ]
    stage_info = ray.get([handle.ready.remote() for handle in handles])  # loaded (a load error raises here)
    model = PipelinedModel(first, [RemoteStage(ray, handle) for handle in handles])
    model.stage_info = stage_info
    tokenizer = load_tokenizer(checkpoint)
    inference = settings.inference
    engine = Engine(
        model,
        tokenizer,
        backend,
        num_ctx=settings.num_ctx or min(DEFAULT_NUM_CTX, model.args.max_position_embeddings),
        max_seqs=settings.server.max_concurrent_requests,
        kv_cache_bytes=inference.kv_cache_mb * 2**20 if inference.kv_cache_mb else None,
    )
    return LLM(checkpoint, tokenizer, model, backend, engine, inference.chat_template)
