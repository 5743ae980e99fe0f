"""Checkpoint loading: `load_checkpoint(path) -> Checkpoint`, with format, architecture and tokenizer detected
from the files. Tensors are lazy and memory-mapped; names are always Hugging Face names."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class LazyTensor:
    """One tensor of a checkpoint, not read until `load()`.

    `dtype` is "F32", "F16", "BF16" for dense tensors or a GGML type name ("Q4_K", "Q8_0", ...) for quantized
    ones. `shape` is the logical shape in HF layout (e.g. (out_features, in_features) for a linear weight).
    """

    name: str  # HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
    shape: tuple[int, ...]
    dtype: str
    source: Path  # the file it lives in (for error messages)
    _read: Callable[[], np.ndarray] = field(repr=False)  # returns the dense array (mmap view when possible)
    _release: Callable[[], None] | None = field(default=None, repr=False)

    def release(self) -> None:
        """Drop this tensor's file pages from the process's resident memory once a copy of its data is all
        that is used (fused or reordered weights); the page cache keeps them, so a later read is cheap."""
        if self._release is not None:
            self._release()

    def load(self) -> np.ndarray:
        """The tensor as a dense numpy array: F32 -> float32 (an mmap view, no copy), F16 -> float16 (view),
        BF16 -> float32, quantized -> float32 dequantized. Shape equals self.shape."""
        return self._read()

    @property
    def quantized(self) -> bool:
        return self.dtype not in ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64")


@dataclass
class Checkpoint:
    """What a loader found on disk. `config` is a Hugging Face style config.json dict (GGUF metadata is
    translated into it), so model code sees one config shape whatever the format."""

    path: Path  # the file or directory the user named
    format: str  # "safetensors" | "gguf"
    config: dict[str, Any]  # HF config keys: model_type, architectures, hidden_size, ...
    tensors: dict[str, LazyTensor]  # by HF name
    directory: Path  # where side files (tokenizer.json, tokenizer_config.json, ...) are looked up
    gguf_metadata: dict[str, Any] | None = None  # raw GGUF key/values (arrays as lists), for GGUF files
    files: list[Path] = field(default_factory=list)  # every weight file that was opened

    @property
    def model_type(self) -> str:
        return self.config.get("model_type", "")

    def quant_types(self) -> dict[str, int]:
        """Count of tensors per dtype, e.g. {"Q4_1": 210, "Q8_0": 1, "F32": 61}."""
        counts: dict[str, int] = {}
        for t in self.tensors.values():
            counts[t.dtype] = counts.get(t.dtype, 0) + 1
        return counts


def open_model(model: Checkpoint | str | Path) -> Checkpoint:
    """The Checkpoint of a model argument: one already opened (so a caller that opened it to see what kind
    of model it is does not read a GGUF's metadata twice: 0.2 s for Qwen2.5-0.5B's), else a path or name,
    resolved (catalog models pulled on first use) and opened."""
    if isinstance(model, Checkpoint):
        return model
    from blazr.model_dir import resolve_model

    return load_checkpoint(resolve_model(str(model)))


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Open a SafeTensors file/directory (single or sharded) or a GGUF file. Raises ModelNotFoundError or
    CheckpointError with a message naming the file and what is wrong."""
    from blazr.loaders.detect import open_checkpoint

    return open_checkpoint(Path(path))


def release_mapped_pages(data: np.memmap, offset: int, nbytes: int) -> None:
    """madvise(DONTNEED) the whole pages inside data[offset : offset + nbytes] of a read-only file mapping;
    a no-op where the OS has no madvise. Later reads fault the pages back in from the page cache."""
    mapping = getattr(data, "_mmap", None)
    if mapping is None or not hasattr(mapping, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = -(-offset // mmap.PAGESIZE) * mmap.PAGESIZE
    stop = (offset + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if stop > start:
        mapping.madvise(mmap.MADV_DONTNEED, start, stop - start)
