"""Reader for CTranslate2's `model.bin` (binary versions 1 to 6, as CTranslate2's model_spec.py writes them
and its model.cc reads them). Generic over specs: it returns every variable under its CTranslate2 name;
what the names mean is the model mapping's business (blazr.loaders.whisper_formats for Whisper).

Layout, all little-endian:
    u32 binary_version
    (version >= 2) string spec name ("WhisperSpec"), u32 spec revision
    u32 variable count, then per variable:
        string name, u8 rank, u32 dims[rank],
        version >= 4: u8 dtype id (float32, int8, int16, int32, float16, bfloat16) and u32 byte count
        version <  4: u8 item size (4 float32, 2 int16, 1 int8: CTranslate2's own old rule) and u32 item count
        the data, unaligned, row-major
    (version >= 3) u32 alias count, then (string alias, string variable name) pairs
A string is a u16 length that counts a closing NUL, then that many bytes. Rank-0 variables are the spec's
scalar attributes (num_heads, activation, flags as int8). Quantized weights are int8 (or int16) with a float32
`<name>_scale`: CTranslate2 multiplies by it to quantize, so dequantizing divides (per row for int8).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blazr.errors import CheckpointError, UnsupportedError

MAX_BINARY_VERSION = 6  # what CTranslate2 4.x writes; later versions may change the layout
# dtype id -> numpy dtype of the stored items; bfloat16 (id 5) is read as its uint16 bits and widened
_DTYPES = (
    np.dtype("<f4"),
    np.dtype("i1"),
    np.dtype("<i2"),
    np.dtype("<i4"),
    np.dtype("<f2"),
    np.dtype("<u2"),
)
_BFLOAT16 = 5
_OLD_ITEM_SIZES = {4: np.dtype("<f4"), 2: np.dtype("<i2"), 1: np.dtype("i1")}


@dataclass
class CT2Model:
    """What one model.bin holds. `variables` are numpy arrays as stored (float32, float16, int8, int16,
    int32 views of the file; bfloat16 widened to float32), with every alias present under its own name too."""

    path: Path
    binary_version: int
    spec: str  # "WhisperSpec", "TransformerSpec", ... ("" for binary version 1)
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> the variable it names
    num_stored: int = 0  # variables the file stores (aliases not counted)

    def scalar(self, name: str, default: int | float | None = None) -> int | float | None:
        """A rank-0 attribute (e.g. "encoder/num_heads") as a Python number, or `default` when absent."""
        value = self.variables.get(name)
        if value is None:
            return default
        if value.ndim != 0:
            raise CheckpointError(f"{self.path}: {name} should be a scalar but has shape {value.shape}")
        return value.item()

    def dequantized(self) -> dict[str, np.ndarray]:
        """The variables with every int8/int16 weight that has a `_scale` divided back into float32 and the
        scales dropped. float16 stays float16 and float32 stays float32 (no copy); scalars are kept as is."""
        out: dict[str, np.ndarray] = {}
        for name, value in self.variables.items():
            scale = self.variables.get(name + "_scale")
            if name.endswith("_scale") and name[: -len("_scale")] in self.variables:
                continue
            if scale is not None and value.dtype.kind == "i" and value.ndim > 0:
                out[name] = _dequantize(value, scale, self.path, name)
            else:
                out[name] = value
        return out


def _dequantize(value: np.ndarray, scale: np.ndarray, path: Path, name: str) -> np.ndarray:
    scale = scale.astype(np.float32)
    if scale.ndim == 0:  # int16: one scale for the whole tensor
        return value.astype(np.float32) / scale
    if scale.shape != value.shape[:1]:
        raise CheckpointError(f"{path}: {name}_scale has shape {scale.shape}, expected ({value.shape[0]},)")
    # int8: one scale per output row, (rows, ...) / (rows, 1, ...)
    return value.astype(np.float32) / scale.reshape(-1, *([1] * (value.ndim - 1)))


class _Cursor:
    """Sequential reads over the mapped file; any read past the end names the file and the offset."""

    def __init__(self, data: np.ndarray, path: Path):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int, what: str) -> np.ndarray:
        if n < 0 or self.pos + n > len(self.data):
            raise CheckpointError(
                f"{self.path}: file is truncated or corrupt: {what} needs {n} bytes at offset {self.pos} "
                f"but the file has {len(self.data)} bytes"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> int:
        (value,) = struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what).tobytes())
        return value

    def string(self, what: str) -> str:
        raw = self.take(self.unpack("H", what), what).tobytes()
        try:
            return raw.split(b"\0", 1)[0].decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: {what} at offset {self.pos} is not UTF-8 text") from None


def read_ct2(path: str | Path) -> CT2Model:
    """Parse a CTranslate2 model.bin (the file, or the directory holding it). Raises CheckpointError for a
    truncated or corrupt file and UnsupportedError for a binary version newer than blazr knows."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    if not path.is_file():
        raise CheckpointError(f"{path}: no CTranslate2 model.bin there")
    if path.stat().st_size < 4:
        raise CheckpointError(f"{path}: file is {path.stat().st_size} bytes, too short for a model.bin")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(data, path)
    version = cur.unpack("I", "binary version")
    if version == 0 or version > 1000:
        raise CheckpointError(f"{path}: not a CTranslate2 model.bin (binary version field reads {version})")
    if version > MAX_BINARY_VERSION:
        raise UnsupportedError(
            f"{path}: CTranslate2 binary version {version}; blazr reads versions 1 to {MAX_BINARY_VERSION}"
        )
    spec, revision = "", 1
    if version >= 2:
        spec = cur.string("spec name")
        revision = cur.unpack("I", "spec revision")
    count = cur.unpack("I", "variable count")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = cur.string("variable name")
        variables[name] = _read_variable(cur, version, name)
    aliases: dict[str, str] = {}
    if version >= 3:
        for _ in range(cur.unpack("I", "alias count")):
            alias = cur.string("alias name")
            target = cur.string(f"target of alias {alias}")
            aliases[alias] = target
    for alias, target in aliases.items():
        # model.cc: an alias that names nothing is skipped; the alias also covers the target's scale
        if target in variables:
            variables.setdefault(alias, variables[target])
        if target + "_scale" in variables:
            variables.setdefault(alias + "_scale", variables[target + "_scale"])
    return CT2Model(path, version, spec, revision, variables, aliases, num_stored=count)


def _read_variable(cur: _Cursor, version: int, name: str) -> np.ndarray:
    rank = cur.unpack("B", f"rank of {name}")
    shape = tuple(int(d) for d in cur.take(4 * rank, f"shape of {name}").view("<u4"))
    if version >= 4:
        type_id = cur.unpack("B", f"dtype of {name}")
        if type_id >= len(_DTYPES):
            raise CheckpointError(f"{cur.path}: variable {name} has unknown CTranslate2 dtype id {type_id}")
        dtype, nbytes = _DTYPES[type_id], cur.unpack("I", f"byte count of {name}")
    else:
        item_size = cur.unpack("B", f"item size of {name}")
        if item_size not in _OLD_ITEM_SIZES:
            raise CheckpointError(f"{cur.path}: variable {name} has unknown item size {item_size}")
        dtype, type_id = _OLD_ITEM_SIZES[item_size], -1
        nbytes = cur.unpack("I", f"item count of {name}") * item_size
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes != expected:
        raise CheckpointError(
            f"{cur.path}: variable {name} holds {nbytes} bytes but shape {list(shape)} of {dtype} "
            f"needs {expected}"
        )
    values = cur.take(nbytes, f"data of {name}").view(dtype).reshape(shape)
    if type_id == _BFLOAT16:  # bf16 is the upper half of a float32
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values
