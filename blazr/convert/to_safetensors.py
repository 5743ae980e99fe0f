"""GGUF -> a Hugging Face SafeTensors model directory, dequantized: config.json (the config blazr reads off the
GGUF), model.safetensors (HF tensor names, q/k rows back in HF order) and, when the file embeds a vocabulary,
tokenizer.json + tokenizer_config.json (BOS/EOS, add_bos_token, chat template). A GGUF's llama3 RoPE comes as
llama.cpp's per-frequency divisors (rope_freqs), which config.json keeps as rope_scaling {"rope_type":
"freq_factors", "factors": [...]}: blazr reads it (and converts it back), transformers does not.

The SafeTensors file is streamed: its header is written from every tensor's shape first, then each tensor is
dequantized, cast and written alone, so memory holds one tensor at a time. The directory is written under a
temporary name and renamed at the end; an existing directory of that name is refused.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import ConfigError, UnsupportedError

DTYPES = {"f32": ("F32", np.float32), "f16": ("F16", np.float16), "bf16": ("BF16", None)}


def gguf_to_safetensors(
    src: Path, out: Path, outtype: str, on_progress: Callable[[float, float | None], None] | None = None
) -> Path:
    from blazr.loaders.gguf import open_gguf

    if outtype not in DTYPES:
        raise UnsupportedError(f"--quantize {outtype!r}: SafeTensors output is f32, f16 or bf16")
    if out.exists():
        raise ConfigError(f"{out} already exists; remove it or pick another --output")
    ckpt = open_gguf(src)
    partial = out.with_name(out.name + ".partial")
    partial.mkdir(parents=True, exist_ok=False)
    try:
        config = dict(ckpt.config) | {
            "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[outtype]
        }
        (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        _write_tokenizer(ckpt, partial)
        write_streamed(partial / "model.safetensors", ckpt.tensors, outtype, on_progress)
        partial.replace(out)
    except BaseException:
        import shutil

        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def write_streamed(path: Path, tensors: dict[str, Any], outtype: str, on_progress=None) -> None:
    """A SafeTensors file of `tensors` (name -> LazyTensor) cast to `outtype`, one tensor in memory at a time."""
    name, numpy_dtype = DTYPES[outtype]
    itemsize = 4 if outtype == "f32" else 2
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key, tensor in tensors.items():
        nbytes = int(np.prod(tensor.shape, dtype=np.int64)) * itemsize
        header[key] = {"dtype": name, "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for i, tensor in enumerate(tensors.values()):
            values = np.ascontiguousarray(tensor.load(), dtype=np.float32)  # dequantized, HF row order
            f.write(_cast(values, outtype, numpy_dtype).tobytes())
            if on_progress is not None:
                on_progress(i + 1, len(tensors))


def _cast(values: np.ndarray, outtype: str, numpy_dtype) -> np.ndarray:
    if outtype != "bf16":
        return values.astype(numpy_dtype)
    bits = values.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))  # round to nearest even
    return (rounded >> 16).astype(np.uint16)


def _write_tokenizer(ckpt: Any, directory: Path) -> None:
    from blazr.errors import TokenizerError
    from blazr.tokenizer import load_tokenizer

    meta = ckpt.gguf_metadata or {}
    if meta.get("tokenizer.ggml.model") in (None, "none"):
        return
    try:
        tokenizer = load_tokenizer(ckpt)
    except TokenizerError as error:
        raise UnsupportedError(
            f"{ckpt.path}: its vocabulary cannot be written as tokenizer.json ({error})"
        ) from None
    tokenizer.inner.save(str(directory / "tokenizer.json"))
    side: dict[str, Any] = {"add_bos_token": bool(tokenizer.add_bos)}
    named = [("bos", tokenizer.bos_id), ("eos", tokenizer.eos_id)]
    named += [
        (kind, meta.get(f"tokenizer.ggml.{key}_token_id"))
        for kind, key in (("unk", "unknown"), ("pad", "padding"))
    ]
    for kind, token_id in named:
        if token_id is not None:
            side[f"{kind}_token"] = tokenizer.inner.id_to_token(token_id)
    if tokenizer.chat_template:
        side["chat_template"] = tokenizer.chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(side, indent=2) + "\n", encoding="utf-8")
