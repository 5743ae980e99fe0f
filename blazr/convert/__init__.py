"""`blazr convert`: Hugging Face SafeTensors <-> GGUF (blazr.convert.to_gguf, blazr.convert.to_safetensors)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from blazr.errors import ConfigError, ModelNotFoundError

FORMATS = ("gguf", "safetensors")


def convert(
    source: Path,
    output: Path,
    fmt: str,
    quantize: str | None = None,
    on_progress: Callable[[float, float | None], None] | None = None,
) -> Path:
    """Write `source` (a SafeTensors model directory or a GGUF file) as `fmt` at `output`; `quantize` is the
    output type (GGUF: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k;
    SafeTensors: f32, f16, bf16)."""
    from blazr.convert.to_gguf import safetensors_to_gguf
    from blazr.convert.to_safetensors import gguf_to_safetensors

    source, output = Path(source).expanduser(), Path(output).expanduser()
    if not source.exists():
        raise ModelNotFoundError(f"{source} does not exist")
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: use gguf or safetensors")
    is_gguf = source.is_file() and source.suffix == ".gguf"
    if fmt == "gguf":
        if is_gguf:
            raise ConfigError(f"{source} is already GGUF; convert a SafeTensors model directory to GGUF")
        return safetensors_to_gguf(source, output, quantize or "f16", on_progress)
    if not is_gguf:
        raise ConfigError(f"{source} is not a .gguf file; --format safetensors converts GGUF to SafeTensors")
    return gguf_to_safetensors(source, output, quantize or "f32", on_progress)
