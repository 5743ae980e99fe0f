"""How the server loads a model: a speech model, a voice, an encoder, a text generator (with the server's
speculative decoding settings), or a derived model (an Ollama Modelfile over a base model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blazr import modelfile
from blazr.config import Settings


def load_for_serving(path: Path, settings: Settings) -> Any:
    """Load a model with the server's settings, in a worker thread (warm_up then runs on the engine thread)."""
    from blazr.loaders import load_checkpoint
    from blazr.loaders.whisper_formats import whisper_format
    from blazr.models import model_task
    from blazr.tasks.speak import is_voice

    if whisper_format(path) is not None:
        from blazr.tasks.transcribe import Transcriber

        return Transcriber.load(path, device=settings.device)
    if is_voice(path):
        from blazr.tasks.speak import Synthesizer

        return Synthesizer.load(path, device=settings.device, voice_dir=settings.voice_dir)
    if path.suffix == modelfile.SUFFIX:
        return _load_derived(path, settings)
    checkpoint = load_checkpoint(path)
    task = settings.inference.task  # "rerank": a causal LM served as a yes/no reranker
    if task or model_task(checkpoint.config, checkpoint.gguf_metadata, checkpoint.directory) != "generate":
        from blazr.tasks.embed import Embedder

        return Embedder.load(checkpoint, device=settings.device, dtype=settings.inference.dtype, task=task)
    return _load_generator(checkpoint, settings, settings.num_ctx)


def _load_generator(checkpoint: Any, settings: Settings, num_ctx: int | None) -> Any:
    from blazr.api import LLM

    return LLM.load(
        checkpoint,
        device=settings.device,
        dtype=settings.inference.dtype,
        num_ctx=num_ctx,
        chat_template=settings.inference.chat_template,
        max_seqs=settings.server.max_concurrent_requests,
        kv_cache_mb=settings.inference.kv_cache_mb,
        kv_cache_type=settings.inference.kv_cache_type,
        **serving_speculation(settings),
    )


def _load_derived(path: Path, settings: Settings) -> Any:
    """A Modelfile's model: its FROM loaded as a text generator (PARAMETER num_ctx as its context), carrying
    the Modelfile (`llm.modelfile`) whose SYSTEM and PARAMETERs the routes apply as defaults."""
    from blazr.loaders import load_checkpoint
    from blazr.model_dir import resolve_model

    spec = modelfile.read(path)
    base = resolve_model(spec.base, pull=False, directory=path.parent)
    llm = _load_generator(load_checkpoint(base), settings, spec.num_ctx or settings.num_ctx)
    if spec.adapter is not None:  # requests get it through request_defaults' lora_adapter
        llm.load_lora(modelfile.ADAPTER_NAME, spec.adapter)
    llm.modelfile = spec
    return llm


def serving_speculation(settings: Settings) -> dict[str, Any]:
    """LLM.load's speculative decoding arguments from inference.speculative_* (empty when off); a draft model
    named by catalog name or file in the model directory is resolved there (never fetched)."""
    inference = settings.inference
    if inference.speculative_method is None and inference.speculative_draft_model is None:
        return {}
    out: dict[str, Any] = {
        "speculative": inference.speculative_method or "draft",
        "num_speculative_tokens": inference.speculative_num_speculative_tokens,
    }
    if inference.speculative_draft_model is not None:
        from blazr.config import resolve_model_dir
        from blazr.model_dir import resolve_model

        directory = resolve_model_dir(settings)
        out["draft_model"] = str(resolve_model(inference.speculative_draft_model, False, directory))
    return out
