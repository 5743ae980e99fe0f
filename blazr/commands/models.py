"""`blazr info`, `blazr list` and `blazr pull`: what a checkpoint holds, what the model directory holds, and
getting a model into it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.commands.output import note
from blazr.commands.progress import quiet
from blazr.config import Settings, load_settings, resolve_model_dir
from blazr.errors import BlazrError, ConfigError, ModelNotFoundError
from blazr.loaders import registry
from blazr.model_dir import (
    ModelEntry,
    architecture_name,
    copy_model,
    count_parameters,
    create_model,
    format_size,
    list_models,
    pull_catalog_model,
    quantization_name,
    remove_model,
)

# (label, config key) rows of `info`, in print order
CONFIG_ROWS = (
    ("hidden size", "hidden_size"),
    ("layers", "num_hidden_layers"),
    ("heads", "num_attention_heads"),
    ("KV heads", "num_key_value_heads"),
    ("vocab", "vocab_size"),
    ("context", "max_position_embeddings"),
    ("FFN dim", "intermediate_size"),
)
# Whisper's config names (encoder-decoder): what `info` shows for a speech model
WHISPER_ROWS = (
    ("width", "d_model"),
    ("encoder", "encoder_layers"),
    ("decoder", "decoder_layers"),
    ("heads", "decoder_attention_heads"),
    ("mel bins", "num_mel_bins"),
    ("vocab", "vocab_size"),
)


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts) instead of a table")]


def info(model: o.ModelArgument = None, model_dir: o.ModelDir = None, as_json: JsonFlag = False) -> None:
    """Show a model's format, architecture, sizes, quantization, file size and license."""
    from blazr.loaders import load_checkpoint
    from blazr.loaders.whisper_formats import whisper_format

    path = o.model_path(model, load_settings(), model_dir)
    fmt = whisper_format(path)
    rows = (
        whisper_info_rows(path, fmt) if fmt in ("ctranslate2", "ggml") else info_rows(load_checkpoint(path))
    )
    if as_json:  # the same lines, keyed by label
        print(json.dumps({label.replace(" ", "_"): value for label, value in rows}, indent=1))
        return
    for label, value in rows:
        print(f"{label + ':':<14} {value}")


def whisper_info_rows(path: Path, fmt: str) -> list[tuple[str, str]]:
    """`info` for a Whisper model in a layout only the speech path reads (CTranslate2, whisper.cpp)."""
    from blazr.loaders.whisper_formats import read_whisper_checkpoint

    config, weights = read_whisper_checkpoint(path)
    n_params = count_parameters(weights.values())
    types: dict[str, int] = {}
    for w in weights.values():
        types[str(w.dtype)] = types.get(str(w.dtype), 0) + 1
    rows = [("model", str(path)), ("format", fmt.upper())]
    rows += [("architecture", "WhisperForConditionalGeneration (whisper)"), ("family", "whisper")]
    rows.append(("parameters", f"{_short_count(n_params)} ({n_params:,})"))
    rows += [(label, str(config[key])) for label, key in WHISPER_ROWS if config.get(key) is not None]
    rows.append(("tensors", ", ".join(f"{t} x{n}" for t, n in sorted(types.items(), key=lambda kv: -kv[1]))))
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    rows.append(("file size", format_size(sum(f.stat().st_size for f in files))))
    return rows


def info_rows(ckpt: Any) -> list[tuple[str, str]]:
    """The (label, value) lines `info` prints; absent config keys are left out."""
    config = ckpt.config
    n_params = count_parameters(ckpt.tensors.values())
    rows = [("model", str(ckpt.path)), ("format", ckpt.format.upper())]
    name = (ckpt.gguf_metadata or {}).get("general.name")
    if name:
        rows.append(("name", str(name)))
    rows.append(("architecture", f"{architecture_name(config)} ({config.get('model_type', '?')})"))
    rows.append(("family", family_of(config)))
    rows.append(("parameters", f"{_short_count(n_params)} ({n_params:,})"))
    rows += [(label, str(config[key])) for label, key in CONFIG_ROWS if config.get(key) is not None]
    rows.append(("quantization", quant_summary(ckpt)))
    rows.append(("file size", format_size(sum(f.stat().st_size for f in ckpt.files))))
    license_text = license_of(ckpt)
    if license_text:
        rows.append(("license", license_text))
    return rows


def family_of(config: dict[str, Any]) -> str:
    """The blazr.models family that runs the config, or why none does (with the supported ones)."""
    from blazr.errors import UnsupportedError
    from blazr.models import GGUF_ARCHITECTURES, model_module_name

    try:
        family = model_module_name(config)
    except UnsupportedError as e:
        return f"none: {e}"
    gguf_family = GGUF_ARCHITECTURES.get(config.get("gguf_architecture") or "", family)
    if gguf_family != family:  # llama.cpp's converter wrote the file in another family's layout (InternLM2)
        return f"{family} ({gguf_family} weights, which llama.cpp's converter wrote in the {family} layout)"
    return family


def quant_summary(ckpt: Any) -> str:
    """Each tensor type with its tensor count, most tensors first, e.g. "Q4_1 x210, F32 x61, Q8_0 x1"."""
    counts = sorted(ckpt.quant_types().items(), key=lambda kv: (-kv[1], kv[0]))
    summary = ", ".join(f"{dtype} x{count}" for dtype, count in counts)
    method = quantization_name(ckpt.config)
    return f"{method} ({summary})" if method else summary


def license_of(ckpt: Any) -> str:
    """GGUF general.license, else the first line of a LICENSE file or the README's `license:` front matter."""
    meta_license = (ckpt.gguf_metadata or {}).get("general.license")
    if meta_license:
        return str(meta_license)
    for name in ("LICENSE", "LICENSE.txt", "LICENSE.md"):
        first = _first_line(ckpt.directory / name)
        if first:
            return first
    readme = ckpt.directory / "README.md"
    if readme.is_file():
        for line in readme.read_text(errors="replace").splitlines()[:40]:
            if line.startswith("license:"):
                return line.split(":", 1)[1].strip()
    return ""


def _first_line(path: Path) -> str:
    if not path.is_file():
        return ""
    lines = (line.strip() for line in path.read_text(errors="replace").splitlines())
    return next((line for line in lines if line), "")


def _short_count(n: int) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(n)


def list_command(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Add parameters, all tensor types, paths")
    ] = False,
    model_dir: o.ModelDir = None,
    as_json: JsonFlag = False,
) -> None:
    """List the models in the model directory: name, format, quant type, architecture, size."""
    directory = resolve_model_dir(load_settings(), model_dir)
    entries = list_models(directory)
    if as_json:
        print(json.dumps([entry_json(entry) for entry in entries], indent=1))
        return
    if not entries:
        catalog = ", ".join(sorted(registry.CATALOG))
        print(f"No models in {directory}.")
        print(f"Get one with `blazr pull <owner/repo>` (Hugging Face) or `blazr pull NAME` ({catalog}).")
        return
    rows = [["NAME", "FORMAT", "QUANT", "ARCH", "SIZE"] + (["PARAMS", "TENSOR TYPES"] if verbose else [])]
    rows += [list_row(entry, verbose) for entry in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for entry in entries:
        if entry.error:
            note(f"{entry.name}: {entry.error}")


def entry_json(entry: ModelEntry) -> dict[str, Any]:
    """`blazr list --json`'s object for one model (error: why it could not be read, else null)."""
    return {
        "name": entry.name,
        "path": str(entry.path),
        "format": entry.format,
        "quantization": entry.quant if not entry.error else None,
        "architecture": entry.architecture,
        "size_bytes": entry.size_bytes,
        "parameters": entry.parameters or None,
        "tensor_types": entry.quant_types,
        "error": entry.error or None,
    }


def list_row(entry: ModelEntry, verbose: bool) -> list[str]:
    if entry.error:
        row = [entry.name, "?", "?", "unreadable (see below)", format_size(entry.size_bytes)]
        return row + (["", ""] if verbose else [])
    row = [entry.name, entry.format, entry.quant, entry.architecture, format_size(entry.size_bytes)]
    if verbose:
        types = ", ".join(f"{k} x{v}" for k, v in sorted(entry.quant_types.items(), key=lambda kv: -kv[1]))
        row += [_short_count(entry.parameters), types]
    return row


def pull(
    name: Annotated[
        str, typer.Argument(help="A catalog name (e.g. smollm2-135m-instruct) or a Hugging Face repo id")
    ],
    file: Annotated[
        str | None,
        typer.Option("--file", help="Download only this file of a Hugging Face repo (e.g. a .gguf)"),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Directory to put it in (default: the model directory)"),
    ] = None,
    model_dir: o.ModelDir = None,
    warm_up: Annotated[
        bool,
        typer.Option(
            "--warm-up/--no-warm-up",
            help="Compile the CPU kernels the model uses now, so its first request does not wait for them",
        ),
    ] = True,
) -> None:
    """Download a model into the model directory and print where it went."""
    settings = load_settings()
    directory = output.expanduser() if output is not None else resolve_model_dir(settings, model_dir)
    entry = registry.lookup(name)
    if entry is not None:
        if file is not None:
            raise ConfigError(f"--file applies to Hugging Face repos; {name!r} is a catalog model (one file)")
        path = pull_catalog_model(entry, directory, quiet=quiet())
    elif "/" in name:
        from blazr.loaders.hub import pull_hf

        note(f"pulling {name} from the Hugging Face Hub into {directory}")
        path = pull_hf(name, directory, file=file)
    else:
        catalog = ", ".join(sorted(registry.CATALOG))
        raise ModelNotFoundError(
            f"{name!r} is neither a catalog model ({catalog}) nor a Hugging Face repo id (owner/name)"
        )
    if warm_up:
        warm_kernels(path, settings)
    print(path)
    sys.stdout.flush()


def warm_kernels(path: Path, settings: Settings) -> None:
    """Load the model as `blazr serve` would and run its warm-up (blazr.engine.warm_up): numba compiles each
    kernel path into its on-disk cache, kept per CPU, and the model's first request on this machine then
    starts in about a second instead of after ~20 s of compiling. Only the numba CPU backend compiles per
    machine ahead of use, so other devices, and speech models (whose kernels compile on first use), skip it."""
    from blazr.backends.cpu import HAS_NUMBA
    from blazr.loaders.whisper_formats import whisper_format
    from blazr.server.state import load_for_serving
    from blazr.tasks.speak import is_voice

    if settings.device != "cpu" or not HAS_NUMBA or whisper_format(path) is not None or is_voice(path):
        return
    start = time.monotonic()
    note("compiling the CPU kernels this model uses, for this CPU (once; --no-warm-up skips it)")
    try:
        model = load_for_serving(path, settings)
        model.warm_up()
    except BlazrError as error:  # the download stands; say why the model will not run here
        note(f"warning: {path} was downloaded but does not load: {error}")
        return
    note(f"kernels ready in {time.monotonic() - start:.1f} s")


def rm(
    names: Annotated[
        list[str], typer.Argument(help="Models in the model directory (names as `blazr list` shows)")
    ],
    model_dir: o.ModelDir = None,
) -> None:
    """Delete models from the model directory (their file or directory)."""
    directory = resolve_model_dir(load_settings(), model_dir)
    for name in names:
        note(f"deleted {remove_model(name, directory)}")


def cp(
    source: Annotated[str, typer.Argument(help="A model in the model directory")],
    destination: Annotated[str, typer.Argument(help="The new name (replaced if it exists, as Ollama's cp)")],
    model_dir: o.ModelDir = None,
) -> None:
    """Copy a model under a new name in the model directory."""
    directory = resolve_model_dir(load_settings(), model_dir)
    note(f"copied {source} to {copy_model(source, destination, directory)}")


def create(
    name: Annotated[str, typer.Argument(help="The new model's name in the model directory")],
    file: Annotated[Path, typer.Option("--file", "-f", help="The Modelfile (FROM, SYSTEM, PARAMETER lines)")],
    model_dir: o.ModelDir = None,
) -> None:
    """Create a derived model from a Modelfile: a model in the model directory with a system prompt and
    default parameters (as `ollama create`)."""
    from blazr import modelfile

    directory = resolve_model_dir(load_settings(), model_dir)
    spec = modelfile.read(file.expanduser())
    created = create_model(name, spec, directory, adapters_from=file.expanduser().resolve().parent)
    note(f"created {created} (FROM {spec.base})")
