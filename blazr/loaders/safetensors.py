"""SafeTensors reader: the header is parsed here (8-byte little-endian length + JSON) and every tensor
becomes a LazyTensor over one np.memmap of its file, so opening a checkpoint reads only the headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, UnsupportedError
from blazr.loaders import Checkpoint, LazyTensor, release_mapped_pages
from blazr.loaders.awq_gptq import repack_int4

HEADER_LEN_BYTES = 8
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format caps the JSON header at 100 MB

# safetensors dtype -> numpy dtype of the stored items (BF16 is read as uint16 and widened on load)
STORAGE_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
# dtypes that exist in the format but that blazr cannot turn into a numpy array yet (size in bytes)
UNREADABLE_DTYPES = {"F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32: bf16 is the upper half of a float32, so shift it into place."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def read_config(directory: Path) -> dict[str, Any]:
    """The directory's config.json as a dict; a SafeTensors model cannot be built without it."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(
            f"{config_path}: config.json is missing; a SafeTensors model needs it beside its weights"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{config_path}: config.json is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: config.json must hold a JSON object")
    return config


def open_safetensors(path: Path, user_path: Path | None = None) -> Checkpoint:
    """A single `.safetensors` file or a sharded `*.safetensors.index.json`, with config.json beside it."""
    if path.name.endswith(".index.json"):
        tensors, files = read_sharded(path)
    else:
        tensors, files = read_safetensors_file(path), [path]
    config = read_config(path.parent)
    # AWQ/GPTQ: each layer's qweight/qzeros/scales(/g_idx) become one int4 `<layer>.weight`
    tensors = repack_int4(tensors, config, path.parent)
    return Checkpoint(
        path=user_path or path,
        format="safetensors",
        config=config,
        tensors=tensors,
        directory=path.parent,
        files=files,
    )


def read_sharded(index_path: Path) -> tuple[dict[str, LazyTensor], list[Path]]:
    """Every shard named by the index's weight_map, each checked to hold the tensors the index puts in it."""
    weight_map = _read_weight_map(index_path)
    tensors: dict[str, LazyTensor] = {}
    shards = sorted(set(weight_map.values()))
    for shard_name in shards:
        shard = index_path.parent / shard_name
        if not shard.is_file():
            raise CheckpointError(f"{index_path}: shard {shard_name} listed in weight_map does not exist")
        tensors.update(read_safetensors_file(shard))
    for name, shard_name in weight_map.items():
        if name not in tensors or tensors[name].source.name != shard_name:
            raise CheckpointError(
                f"{index_path}: tensor {name} is mapped to {shard_name} but that shard lacks it"
            )
    return tensors, [index_path.parent / s for s in shards]


def _read_weight_map(index_path: Path) -> dict[str, str]:
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{index_path}: index is not valid JSON ({e})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path}: index has no weight_map")
    return weight_map


def read_safetensors_file(path: Path) -> dict[str, LazyTensor]:
    """Parse one file's header and return its tensors, lazily mapped; validates every offset first."""
    file_size = path.stat().st_size
    header, data_start = _read_header(path, file_size)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _lazy_tensor(path, name, entry, data, data_start, file_size)
    return tensors


def _read_header(path: Path, file_size: int) -> tuple[dict[str, Any], int]:
    if file_size < HEADER_LEN_BYTES:
        raise CheckpointError(f"{path}: file is {file_size} bytes, too short for a SafeTensors header")
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(HEADER_LEN_BYTES))
        if header_len > min(file_size - HEADER_LEN_BYTES, MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path}: header length {header_len} runs past the end of the file ({file_size} bytes); "
                "the file is truncated or not SafeTensors"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: SafeTensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: SafeTensors header must be a JSON object")
    return header, HEADER_LEN_BYTES + header_len


def _lazy_tensor(
    path: Path, name: str, entry: Any, data: np.memmap, data_start: int, file_size: int
) -> LazyTensor:
    dtype, shape, begin, end = _check_entry(path, name, entry)
    if data_start + end > file_size:
        raise CheckpointError(
            f"{path}: tensor {name} ends at byte {data_start + end} but the file has {file_size} bytes "
            "(truncated download?)"
        )

    def read() -> np.ndarray:
        raw = data[data_start + begin : data_start + end]
        return _decode(raw, dtype, shape, path, name)

    def release() -> None:
        release_mapped_pages(data, data_start + begin, end - begin)

    return LazyTensor(name=name, shape=shape, dtype=dtype, source=path, _read=read, _release=release)


def _check_entry(path: Path, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
    """Validate one header entry: known dtype, integer shape, offsets that match shape * itemsize."""
    try:
        dtype, shape, (begin, end) = (
            entry["dtype"],
            tuple(int(d) for d in entry["shape"]),
            entry["data_offsets"],
        )
        begin, end = int(begin), int(end)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path}: tensor {name} has a malformed header entry: {entry!r}") from None
    itemsize = STORAGE_DTYPES[dtype].itemsize if dtype in STORAGE_DTYPES else UNREADABLE_DTYPES.get(dtype)
    if itemsize is None:
        raise CheckpointError(f"{path}: tensor {name} has unknown dtype {dtype!r}")
    expected = int(np.prod(shape, dtype=np.int64)) * itemsize
    if begin < 0 or end < begin or end - begin != expected:
        raise CheckpointError(
            f"{path}: tensor {name} has data_offsets [{begin}, {end}] ({end - begin} bytes) but shape "
            f"{list(shape)} of {dtype} needs {expected} bytes"
        )
    return dtype, shape, begin, end


def _decode(raw: np.ndarray, dtype: str, shape: tuple[int, ...], path: Path, name: str) -> np.ndarray:
    if dtype not in STORAGE_DTYPES:
        raise UnsupportedError(f"{path}: tensor {name} is {dtype}, which blazr cannot read yet")
    values = raw.view(STORAGE_DTYPES[dtype]).reshape(shape)
    return bf16_to_f32(values) if dtype == "BF16" else values
