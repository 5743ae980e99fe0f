"""Flags shared by several commands, and how they become Settings and a loaded model.

Every flag defaults to None ("not given"), so the config file and BLAZR_* variables fill what the user left
out; config.py checks each value and names the flag when one is wrong."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from blazr.config import Settings, apply_flags, load_settings, resolve_model_dir
from blazr.errors import ConfigError
from blazr.loaders.registry import DEFAULT_MODEL

if TYPE_CHECKING:
    from blazr.api import LLM

SAMPLING = "Sampling"
RUNTIME = "Runtime"

MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", help="Most tokens to generate (default: 2048)", rich_help_panel=SAMPLING),
]
Temperature = Annotated[
    float | None, typer.Option("--temperature", help="0 = greedy (default: 0.7)", rich_help_panel=SAMPLING)
]
TopP = Annotated[
    float | None, typer.Option("--top-p", help="Nucleus sampling (default: 0.9)", rich_help_panel=SAMPLING)
]
TopK = Annotated[
    int | None, typer.Option("--top-k", help="0 = disabled (default: 0)", rich_help_panel=SAMPLING)
]
MinP = Annotated[float | None, typer.Option("--min-p", help="(default: 0.05)", rich_help_panel=SAMPLING)]
RepeatPenalty = Annotated[
    float | None, typer.Option("--repeat-penalty", help="(default: 1.0, off)", rich_help_panel=SAMPLING)
]
RepeatLastN = Annotated[
    int | None,
    typer.Option(
        "--repeat-last-n", help="Tokens the repeat penalty looks back (default: 64)", rich_help_panel=SAMPLING
    ),
]
Seed = Annotated[
    int | None, typer.Option("--seed", help="Seed for reproducible sampling", rich_help_panel=SAMPLING)
]
Stop = Annotated[
    list[str] | None,
    typer.Option("--stop", metavar="TEXT", help="Stop at this text (repeatable)", rich_help_panel=SAMPLING),
]

Device = Annotated[
    str | None,
    typer.Option("--device", help="cpu, cuda, cuda:N, wgpu, wgpu:N (default: cpu)", rich_help_panel=RUNTIME),
]
DType = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="f32, f16, bf16, or q8: int8 activations in quantized matmuls (cpu; its default for packed weights)",
        rich_help_panel=RUNTIME,
    ),
]
KvCacheType = Annotated[
    str | None,
    typer.Option(
        "--kv-cache-type",
        help="f32, f16 (half the memory), or auto: f16 where the cpu rounds activations to int8 (packed weights)",
        rich_help_panel=RUNTIME,
    ),
]
NumCtx = Annotated[
    int | None, typer.Option("--num-ctx", help="Initial KV cache size in tokens", rich_help_panel=RUNTIME)
]
ChatTemplate = Annotated[
    str | None,
    typer.Option(
        "--chat-template", help="Built-in template NAME or a template FILE", rich_help_panel=RUNTIME
    ),
]
Task = Annotated[
    str | None,
    typer.Option(
        "--task",
        help="rerank: load a causal LM as a yes/no reranker (Qwen3-Reranker); default: what the model is",
        rich_help_panel=RUNTIME,
    ),
]
ModelDir = Annotated[
    Path | None,
    typer.Option("--model-dir", help="Model directory (default: ~/.blazr/models)", rich_help_panel=RUNTIME),
]

VoiceDir = Annotated[
    Path | None,
    typer.Option(
        "--voice-dir",
        help="Kokoro voice packs (<name>.pt or .safetensors) beside the model's own (default: BLAZR_VOICE_DIR)",
        rich_help_panel=RUNTIME,
    ),
]

Speculative = Annotated[
    str | None,
    typer.Option(
        "--speculative",
        help="Speculative decoding: ngram (prompt lookup) or draft (needs --draft-model)",
        rich_help_panel=RUNTIME,
    ),
]
DraftModel = Annotated[
    str | None,
    typer.Option(
        "--draft-model",
        metavar="PATH",
        help="Smaller model with the same vocabulary",
        rich_help_panel=RUNTIME,
    ),
]
NumSpeculativeTokens = Annotated[
    int | None,
    typer.Option(
        "--num-speculative-tokens", help="Draft tokens per step (default: 5)", rich_help_panel=RUNTIME
    ),
]

Lora = Annotated[
    Path | None,
    typer.Option(
        "--lora",
        help="A LoRA adapter applied to the model: a PEFT directory or a llama.cpp GGUF adapter",
        rich_help_panel=RUNTIME,
        exists=True,
    ),
]
ModelArgument = Annotated[
    str | None,
    typer.Argument(
        help=f"Model path or name (default: config default_model, else {DEFAULT_MODEL})", show_default=False
    ),
]

# flag parameter name -> (settings key, flag as the user types it)
FLAG_KEYS = {
    "max_tokens": ("generation.max_tokens", "--max-tokens"),
    "temperature": ("generation.temperature", "--temperature"),
    "top_p": ("generation.top_p", "--top-p"),
    "top_k": ("generation.top_k", "--top-k"),
    "min_p": ("generation.min_p", "--min-p"),
    "repeat_penalty": ("generation.repeat_penalty", "--repeat-penalty"),
    "repeat_last_n": ("generation.repeat_last_n", "--repeat-last-n"),
    "seed": ("generation.seed", "--seed"),
    "stop": ("generation.stop", "--stop"),
    "device": ("device", "--device"),
    "voice_dir": ("voice_dir", "--voice-dir"),
    "dtype": ("inference.dtype", "--dtype"),
    "num_ctx": ("num_ctx", "--num-ctx"),
    "kv_cache_type": ("inference.kv_cache_type", "--kv-cache-type"),
    "chat_template": ("inference.chat_template", "--chat-template"),
    "task": ("inference.task", "--task"),
}


def settings_from_flags(**flags: Any) -> Settings:
    """Defaults < config file < environment < these flags (named as in FLAG_KEYS; None = not given).
    An empty --stop list counts as not given."""
    given = {}
    for name, value in flags.items():
        key, flag = FLAG_KEYS[name]
        given[key] = (None if name == "stop" and not value else value, flag)
    return apply_flags(load_settings(), given)


def settings_from_params(params: dict[str, Any]) -> Settings:
    """settings_from_flags over the shared flags among a command's parameters (pass `locals()`)."""
    return settings_from_flags(**{name: value for name, value in params.items() if name in FLAG_KEYS})


def sampling_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for LLM.stream / LLM.chat from the merged generation settings."""
    g = settings.generation
    return {
        "max_tokens": g.max_tokens,
        "temperature": g.temperature,
        "top_p": g.top_p,
        "top_k": g.top_k,
        "min_p": g.min_p,
        "repeat_penalty": g.repeat_penalty,
        "repeat_last_n": g.repeat_last_n,
        "frequency_penalty": g.frequency_penalty,
        "presence_penalty": g.presence_penalty,
        "seed": g.seed,
        "stop": list(g.stop),
    }


def model_path(model: str | None, settings: Settings, model_dir: Path | None) -> Path:
    """The model a command runs: its argument, else config default_model, else the catalog default."""
    from blazr.model_dir import resolve_model

    name = model or settings.default_model or DEFAULT_MODEL
    return resolve_model(name, pull=True, directory=resolve_model_dir(settings, model_dir))


def speculation_kwargs(
    speculative: str | None, draft_model: str | None, num_tokens: int | None, settings: Settings, model_dir
) -> dict[str, Any]:
    """LLM.load arguments for --speculative / --draft-model / --num-speculative-tokens (empty when off)."""
    from blazr.model_dir import resolve_model

    if speculative not in (None, "ngram", "draft"):
        raise ConfigError(
            f"--speculative {speculative!r}: use ngram (prompt lookup) or draft (a draft model)"
        )
    if speculative == "draft" and draft_model is None:
        raise ConfigError("--speculative draft needs --draft-model PATH (a smaller model, same vocabulary)")
    if speculative == "ngram" and draft_model is not None:
        raise ConfigError("--draft-model goes with --speculative draft, not ngram")
    if num_tokens is not None and not 1 <= num_tokens <= 32:
        raise ConfigError(f"--num-speculative-tokens {num_tokens}: it must be in [1, 32]")
    if speculative is None and draft_model is None:
        return {}
    kwargs: dict[str, Any] = {
        "speculative": speculative or "draft",
        "num_speculative_tokens": num_tokens or 5,
    }
    if draft_model is not None:
        directory = resolve_model_dir(settings, model_dir)
        kwargs["draft_model"] = str(resolve_model(draft_model, pull=True, directory=directory))
    return kwargs


def load_llm(
    model: str | None,
    settings: Settings,
    model_dir: Path | None,
    verbose: bool = False,
    speculation: dict[str, Any] | None = None,
    lora: Path | None = None,
) -> LLM:
    """Resolve (pulling a catalog model on first use) and load the model the flags and settings name;
    `speculation` holds speculative-decoding arguments for LLM.load (see speculation_kwargs); `lora` is a
    LoRA adapter applied to every request (--lora)."""
    import time

    from blazr.api import LLM

    path = model_path(model, settings, model_dir)
    if path.suffix == ".modelfile":  # blazr/modelfile.py: its SYSTEM and PARAMETERs are applied by the server
        raise ConfigError(
            f"{path.name} is a derived model (a Modelfile): serve it with `blazr serve`, or run the model its "
            "FROM line names"
        )
    from blazr.commands.progress import progress_bar

    start = time.perf_counter()
    with progress_bar(f"loading {path.name}", None) as update:
        llm = LLM.load(
            str(path),
            device=settings.device,
            dtype=settings.inference.dtype,
            num_ctx=settings.num_ctx,
            kv_cache_type=settings.inference.kv_cache_type,
            chat_template=settings.inference.chat_template,
            lora=lora,
            on_progress=update,
            **(speculation or {}),
        )
    if verbose:
        print(f"loaded {path} on {settings.device} in {time.perf_counter() - start:.2f}s", file=sys.stderr)
    return llm
