"""The swarm leader's view of a model: its tokenizer and chat template here, its engine on the replicas.

The server treats a SwarmLLM like a loaded LLM (blazr.api): routes tokenize and render templates with it, and
its `engine` answers what they ask of one (context size, vocabulary, slots, LoRA adapters). The work runs on
its ReplicaSet, which the server uses as the model's runner (blazr.server.state.start_runner).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from blazr.config import Settings
from blazr.distributed.replica_set import ReplicaSet
from blazr.engine.lora_registry import LoraRegistry
from blazr.errors import UnsupportedError


class SwarmLLM:
    task = "generate"
    remote = True  # the weights are on the replicas: no in-process forward (embeddings of hidden states)

    def __init__(self, checkpoint: Any, tokenizer: Any, replicas: ReplicaSet, chat_template: str | None):
        self.checkpoint = checkpoint
        self.tokenizer = tokenizer
        self.replicas = replicas
        self.chat_template = chat_template
        self.engine: Any = None  # RemoteEngineView once the replicas are ready
        self.backend = SimpleNamespace(name="swarm")

    def start_runner(self) -> ReplicaSet:
        return self.replicas

    def warm_up(self) -> None:
        """Wait for every replica to load and warm its model (they do so in parallel, on their nodes)."""
        info = self.replicas.wait_ready()
        self.engine = RemoteEngineView(info["num_ctx"], info["vocab_size"])
        self.backend = SimpleNamespace(name=info["backend"])


class RemoteEngineView:
    """What the routes read from an Engine, for one that runs elsewhere."""

    def __init__(self, num_ctx: int, vocab_size: int):
        self.num_ctx = num_ctx
        self.vocab_size = vocab_size
        self.slots = NoSlots()
        self.loras = LoraRegistry(None)  # supported is False: adapter routes say the model takes none


class NoSlots:
    """A swarm keeps no slots: each replica's KV cache is its own."""

    slots: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        raise UnsupportedError(
            "slots keep a conversation's KV cache in one process; a swarm's replicas do not share them"
        )


@dataclass
class Placement:
    """Where a model's replicas go: `replicas` actors of `cpus_per_replica` CPUs each, on nodes advertising
    `resource` (None: any node); with `prefill`, those replicas decode and the prefill placement's compute
    the prompts (disaggregated serving); with `stages` > 1 each replica is a pipeline of that many actors."""

    replicas: int
    cpus_per_replica: int
    resource: str | None = None
    prefill: Placement | None = None
    stages: int = 1  # pipeline stages of each replica, each on its own node (blazr.distributed.pipeline)
    lanes: int | None = None  # a pipeline replica's engines (None: one per machine its stages run on)


PREFILL_RESOURCE = "blazr_prefill"  # what `blazr disagg --role prefill` nodes advertise
DECODE_RESOURCE = "blazr_decode"


def swarm_loader(ray: ModuleType, placement: Placement, served: Path | None = None):
    """The server's model loader on a swarm leader: the text generation model `served` (None: any) runs as
    replicas on the cluster, placed as `placement` says; any other kind of model (an encoder, Whisper, a
    voice) loads in the leader's process as `serve` does. Another text model is refused: the cluster's CPUs
    are sized for one (its replicas would wait for room until the first model is evicted, which happens only
    after a load)."""
    from blazr.server.model_loading import load_for_serving

    def load(path: Path, settings: Settings) -> Any:
        from blazr import modelfile
        from blazr.loaders import load_checkpoint
        from blazr.loaders.whisper_formats import whisper_format
        from blazr.models import model_task
        from blazr.tasks.speak import is_voice
        from blazr.tokenizer import load_tokenizer

        if whisper_format(path) is not None or is_voice(path) or path.suffix == modelfile.SUFFIX:
            return load_for_serving(path, settings)
        checkpoint = load_checkpoint(path)
        task = model_task(checkpoint.config, checkpoint.gguf_metadata, checkpoint.directory)
        if task != "generate" or settings.inference.task:
            return load_for_serving(path, settings)
        if served is not None and path.resolve() != served.resolve():
            raise UnsupportedError(
                f"this swarm serves one text model, {served.name}; {path.name} is not it (serve it with its own "
                "swarm or `blazr serve`)"
            )
        tokenizer = load_tokenizer(checkpoint)
        return SwarmLLM(
            checkpoint,
            tokenizer,
            place(ray, str(path.resolve()), settings, placement),
            settings.inference.chat_template,
        )

    return load


def place(ray: ModuleType, model_path: str, settings: Settings, placement: Placement) -> ReplicaSet:
    """Start the model's actors as `placement` says (they load in the background; wait_ready waits)."""
    from blazr.distributed.prefill_pool import PrefillPool

    prefill = None
    if placement.prefill is not None:
        p = placement.prefill
        prefill = PrefillPool(ray, model_path, settings, p.replicas, p.cpus_per_replica, p.resource)
    if prefill is not None and placement.stages > 1:
        raise UnsupportedError(
            "disaggregated serving runs whole models: pipeline stages are for `blazr swarm`"
        )
    p = placement
    return ReplicaSet(
        ray, model_path, settings, p.replicas, p.cpus_per_replica, p.resource, prefill, p.stages, p.lanes
    )
