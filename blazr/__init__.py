"""blazr: one pip install that runs text, speech and embedding models on whatever GPU you have."""

__version__ = "0.1.0"

__all__ = ["__version__", "load"]


def load(model: str, device: str = "cpu", task: str | None = None, **kwargs):
    """Load a model by path or name: a text generator as `blazr.api.LLM` (generate, stream, chat), an
    embedding model or reranker as `blazr.tasks.embed.Embedder` (embed, rerank), a Whisper model as
    `blazr.tasks.transcribe.Transcriber` (transcribe), a Piper voice or a Hugging Face VitsModel (MMS-TTS)
    as `blazr.tasks.speak.Synthesizer` (synthesize, stream). task="rerank" loads a causal LM as a yes/no
    reranker (Qwen3-Reranker), which its checkpoint cannot say by itself."""
    from blazr.api import LLM
    from blazr.loaders import load_checkpoint
    from blazr.loaders.whisper_formats import whisper_format
    from blazr.model_dir import resolve_model
    from blazr.models import model_task
    from blazr.tasks.speak import is_voice

    path = resolve_model(str(model))
    if task is None and whisper_format(path) is not None:
        from blazr.tasks.transcribe import Transcriber

        return Transcriber.load(path, device=device, **kwargs)
    if task is None and is_voice(path):
        from blazr.tasks.speak import Synthesizer

        return Synthesizer.load(path, device=device, **kwargs)
    checkpoint = load_checkpoint(path)
    own = model_task(checkpoint.config, checkpoint.gguf_metadata, checkpoint.directory)
    if task is not None or own in ("embed", "rerank"):
        from blazr.tasks.embed import Embedder

        return Embedder.load(checkpoint, device=device, task=task, **kwargs)
    return LLM.load(checkpoint, device=device, **kwargs)
