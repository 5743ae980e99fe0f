"""PyTorch's `torch.save` files (.pt / .pth, the zip format PyTorch writes since 1.6) read as numpy arrays,
without torch and without running the pickle's code.

The file is a zip: `<name>/data.pkl` pickles the saved object (a tensor, or dicts of tensors: a state dict),
each tensor a call of `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` whose storage is
a persistent id ("storage", torch.<Type>Storage, key, location, numel) naming the raw bytes
`<name>/data/<key>`; `<name>/byteorder` says their byte order (little when absent). The unpickler here knows
exactly those names (and dicts, OrderedDict, the parameter wrapper) and refuses every other global, so a file
can describe arrays but never call anything: what `torch.load(weights_only=True)` allows, and less.
Kokoro-82M publishes its weights (kokoro-v1_0.pth) and voice packs (voices/*.pt) this way.
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError
from blazr.loaders.safetensors import bf16_to_f32

# torch.<Type>Storage -> the numpy dtype of its bytes (bfloat16 widened after reading)
STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Storage:
    """A storage's bytes as a flat numpy array of its element type."""

    def __init__(self, values: np.ndarray, bfloat16: bool):
        self.values, self.bfloat16 = values, bfloat16


def _rebuild_tensor(storage: _Storage, offset: int, size, stride, *_rest) -> np.ndarray:
    """torch._utils._rebuild_tensor_v2: a strided view of the storage, copied into a C-contiguous array."""
    values, item = storage.values, storage.values.itemsize
    if len(size) == 0:
        view = values[offset : offset + 1].reshape(())
    else:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) if all(size) else offset
        if all(size) and last >= len(values):
            raise CheckpointError("a tensor reaches past the end of its storage")
        view = np.lib.stride_tricks.as_strided(
            values[offset:], shape=tuple(size), strides=tuple(s * item for s in stride)
        )
    out = np.array(view, order="C")  # a copy (ascontiguousarray would make a 0-d tensor 1-d)
    if storage.bfloat16:
        out = bf16_to_f32(out)
    return out


def _rebuild_parameter(data: np.ndarray, *_rest) -> np.ndarray:
    return data


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str, little: bool):
        super().__init__(file)
        self.archive, self.prefix, self.little = archive, prefix, little
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise CheckpointError(f"the file's pickle names {module}.{name}, which a tensor file never needs")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) >= 4 and pid[0] == "storage"):
            raise CheckpointError(f"unknown persistent id {pid!r}")
        kind, key = pid[1], str(pid[2])
        if not isinstance(kind, _StorageType):
            raise CheckpointError(f"storage of unknown type {kind!r}")
        if key not in self.storages:
            dtype = np.dtype(STORAGE_DTYPES[kind.name]).newbyteorder("<" if self.little else ">")
            try:
                raw = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise CheckpointError(f"storage {key} is missing from the file") from None
            values = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))
            self.storages[key] = _Storage(values, kind.name == "BFloat16Storage")
        return self.storages[key]


def read_torch_file(path: Path | str) -> Any:
    """The object `torch.save` wrote to `path`, tensors as numpy arrays (dicts stay dicts)."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise CheckpointError(
            f"{path}: not a PyTorch zip file (files saved with torch.save before PyTorch 1.6 are not read)"
        ) from None
    except OSError as e:
        raise CheckpointError(f"{path}: {e}") from None
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: a PyTorch file holds one data.pkl, found {len(pickles)}")
        prefix = pickles[0][: -len("data.pkl")]
        names = set(archive.namelist())
        order = (
            archive.read(prefix + "byteorder").decode().strip() if prefix + "byteorder" in names else "little"
        )
        with archive.open(pickles[0]) as f:
            try:
                return _Unpickler(f, archive, prefix, order == "little").load()
            except CheckpointError as e:
                raise CheckpointError(f"{path}: {e}") from None
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
                raise CheckpointError(f"{path}: a broken PyTorch pickle ({e})") from None
