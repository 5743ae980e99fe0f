"""AWQ and GPTQ int4 SafeTensors checkpoints (features.md §1.7): each quantized layer's qweight, qzeros,
scales (and GPTQ g_idx) become one `<layer>.weight` tensor of the Hugging Face shape (N, K), so models,
strict weight checks, parameter counts and `info` see an ordinary checkpoint. The weight's type is I4Z
(blazr.quant.int4): repacked into blocks when a backend multiplies it packed, or dequantized exactly to
float32 when it does not. Biases and the layers that were not quantized (lm_head, embeddings, norms) pass
through untouched.

Detection: the settings come from config.json `quantization_config`, else quantize_config.json (AutoGPTQ),
else quant_config.json (AutoAWQ). Without a quant_method, any `*.g_idx` tensor means GPTQ (checked first:
GPTQ has qweight tensors too), as does a qweight as wide as its scales; any other `*.qweight` means AWQ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, UnsupportedError
from blazr.loaders import LazyTensor
from blazr.quant import int4

METHODS = ("awq", "gptq")
SIDE_FILES = ("quantize_config.json", "quant_config.json")
GPTQ_FORMATS = {"gptq": 1, "gptq_v2": 0}  # checkpoint_format -> what to add to a stored zero
_PARTS = ("qweight", "qzeros", "scales", "g_idx")
_FLOATS = ("F32", "F16", "BF16")


@dataclass(frozen=True)
class Int4Settings:
    method: str  # "awq" | "gptq"
    group_size: int | None  # inputs per group, -1 for one group per row; None: read from the shapes
    sym: bool  # GPTQ: a checkpoint without qzeros uses the symmetric zero 8
    zero_offset: int  # 1 for GPTQ's classic format, which stores z - 1
    where: Path  # the file the settings came from (for messages)


# ---- settings -------------------------------------------------------------------------------------------


def read_quant_config(config: dict[str, Any], directory: Path) -> tuple[dict[str, Any], Path]:
    """The quantization settings and the file they came from ({} when there are none)."""
    qc = config.get("quantization_config")
    if isinstance(qc, dict) and qc.get("quant_method"):
        return qc, directory / "config.json"
    for name in SIDE_FILES:
        path = directory / name
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise CheckpointError(f"{path}: not valid JSON ({e})") from None
            if isinstance(data, dict):
                return data, path
    return (qc if isinstance(qc, dict) else {}), directory / "config.json"


def int4_settings(config: dict[str, Any], directory: Path, tensors: dict[str, LazyTensor]):
    """Int4Settings for an AWQ/GPTQ checkpoint, None for any other; UnsupportedError for a quantization
    blazr cannot read (other bits, methods or layouts)."""
    qc, where = read_quant_config(config, directory)
    method = str(qc.get("quant_method") or "").lower()
    packed = any(name.endswith(".qweight") for name in tensors)
    if method == "mxfp4":
        return None  # GPT-OSS's MXFP4 experts: the family repacks their blocks (blazr.models.gpt_oss_mxfp4)
    if method and method not in METHODS:
        if any(t.dtype not in _FLOATS and len(t.shape) >= 2 for t in tensors.values()):
            raise UnsupportedError(
                f"{where}: quant_method {method!r} is not supported; blazr reads AWQ and GPTQ int4 "
                "SafeTensors checkpoints (and GGUF files)"
            )
        return None  # a method named over float weights: nothing was packed
    if not packed:
        return None
    method = method or _method_from_tensors(tensors)
    bits = qc.get("bits", qc.get("w_bit", 4))
    if bits != 4:
        raise UnsupportedError(
            f"{where}: {method} weights of {bits} bits are not supported; blazr reads 4-bit"
        )
    group = _group_size(qc, where)
    if method == "awq":
        version = str(qc.get("version") or "gemm").lower()
        if version != "gemm":
            raise UnsupportedError(
                f"{where}: AWQ version {version!r} is not supported; blazr reads the GEMM layout "
                "(version 'gemm')"
            )
        return Int4Settings("awq", group, False, 0, where)
    fmt = "marlin" if qc.get("is_marlin_format") else str(qc.get("checkpoint_format") or "gptq").lower()
    if fmt not in GPTQ_FORMATS:
        raise UnsupportedError(
            f"{where}: GPTQ checkpoint_format {fmt!r} is not supported; blazr reads 'gptq' and 'gptq_v2'"
        )
    return Int4Settings("gptq", group, bool(qc.get("sym", True)), GPTQ_FORMATS[fmt], where)


def _method_from_tensors(tensors: dict[str, LazyTensor]) -> str:
    """GPTQ when there is a g_idx or a qweight as wide as its scales (packed along K), else AWQ (packed
    along N: an eighth of the scales' width)."""
    if any(name.endswith(".g_idx") for name in tensors):
        return "gptq"
    name = next(n for n in tensors if n.endswith(".qweight"))
    scales = tensors.get(name.removesuffix("qweight") + "scales")
    gptq = scales is not None and len(scales.shape) == 2 and scales.shape[1] == tensors[name].shape[-1]
    return "gptq" if gptq else "awq"


def _group_size(qc: dict[str, Any], where: Path) -> int | None:
    group = qc.get("group_size", qc.get("q_group_size"))
    if group is None:
        return None
    if not isinstance(group, int) or isinstance(group, bool) or (group < 1 and group != -1):
        raise CheckpointError(f"{where}: group_size must be a positive integer or -1, not {group!r}")
    return group


# ---- tensors --------------------------------------------------------------------------------------------


@dataclass
class Int4Tensor(LazyTensor):
    """An AWQ/GPTQ layer as one weight: load() -> (N, K) float32 (exact), load_blocks() -> I4Z rows
    (N, K/32 * 20) uint8 whose inputs are in `input_perm` order."""

    _parts: Callable[[], int4.Int4Parts] | None = field(default=None, repr=False)
    _groups: Callable[[], np.ndarray] | None = field(default=None, repr=False)

    def load_blocks(self) -> np.ndarray:
        parts = self._parts()
        try:
            return int4.pack_i4z(parts, int4.column_order(parts.groups))
        except ValueError as e:
            raise CheckpointError(f"{self.source}: {self.name}: {e}") from None

    @property
    def input_perm(self) -> np.ndarray | None:
        """(K,) int32: packed column j is input feature input_perm[j] (GPTQ act-order), else None."""
        return int4.column_order(self._groups())

    def release(self) -> None:
        """Nothing of the file is held: the blocks are built anew by each load_blocks()."""


def repack_int4(tensors: dict[str, LazyTensor], config: dict[str, Any], directory: Path):
    """The checkpoint's tensors with each AWQ/GPTQ layer merged into one `<layer>.weight`; unchanged for any
    other checkpoint. Records the settings as config["quantization_config"] when only a side file had them."""
    settings = int4_settings(config, directory, tensors)
    if settings is None:
        return tensors
    if not isinstance(config.get("quantization_config"), dict):
        qc, _ = read_quant_config(config, directory)
        config["quantization_config"] = {**qc, "quant_method": settings.method, "bits": 4}
    out: dict[str, LazyTensor] = {}
    layers: dict[str, dict[str, LazyTensor]] = {}
    for name, tensor in tensors.items():
        prefix, _, part = name.rpartition(".")
        if prefix and part in _PARTS:
            layers.setdefault(prefix, {})[part] = tensor
        else:
            out[name] = tensor
    for prefix, parts in layers.items():
        if "qweight" not in parts:
            stray = next(iter(parts.values()))
            raise CheckpointError(f"{stray.source}: {stray.name} has no {prefix}.qweight beside it")
        if prefix + ".weight" in out:
            raise CheckpointError(f"{parts['qweight'].source}: {prefix} has both a weight and a qweight")
        out[prefix + ".weight"] = layer_tensor(prefix, parts, settings)
    return out


def layer_tensor(prefix: str, parts: dict[str, LazyTensor], s: Int4Settings) -> LazyTensor:
    """One layer's weight from its parts; shapes and dtypes are checked here, before any data is read."""
    qweight, where = parts["qweight"], parts["qweight"].source
    if "scales" not in parts:
        raise CheckpointError(f"{where}: {prefix}.scales is missing ({prefix}.qweight needs its scales)")
    scales, qzeros, g_idx = parts["scales"], parts.get("qzeros"), parts.get("g_idx")
    if qzeros is None and not (s.method == "gptq" and s.sym):
        raise CheckpointError(
            f"{where}: {prefix}.qzeros is missing (an asymmetric {s.method} layer needs it)"
        )
    _check_dtypes(prefix, where, qweight, qzeros, scales, g_idx)
    shape_of = _awq_shapes if s.method == "awq" else _gptq_shapes
    n, k, group = shape_of(prefix, where, s, qweight, qzeros, scales, g_idx)

    def groups() -> np.ndarray:  # (K,) each input's group
        if g_idx is None:
            return np.arange(k) // group
        found = g_idx.load().astype(np.int64)
        if found.size and (found.min() < 0 or found.max() >= scales.shape[0]):
            raise CheckpointError(f"{where}: {prefix}.g_idx names groups outside 0..{scales.shape[0] - 1}")
        return found

    def read() -> int4.Int4Parts:
        zeros = None if qzeros is None else qzeros.load()
        if s.method == "awq":
            return int4.awq_parts(qweight.load(), zeros, scales.load(), group)
        return int4.gptq_parts(qweight.load(), zeros, scales.load(), groups(), s.zero_offset)

    def dense() -> np.ndarray:
        return int4.dequantize_parts(read())  # (N, K) float32

    name = prefix + ".weight"
    if k % int4.BLOCK or group % int4.BLOCK or scales.dtype != "F16":
        # I4Z blocks need groups in whole 32-input runs and f16 scales; anything else loads dense (exact)
        return LazyTensor(name=name, shape=(n, k), dtype="F32", source=where, _read=dense)
    return Int4Tensor(name, (n, k), "I4Z", where, dense, _parts=read, _groups=groups)


def _check_dtypes(prefix: str, where: Path, qweight, qzeros, scales, g_idx) -> None:
    wanted = [(qweight, ("I32",)), (qzeros, ("I32",)), (scales, _FLOATS), (g_idx, ("I32", "I64"))]
    for tensor, dtypes in wanted:
        if tensor is not None and tensor.dtype not in dtypes:
            raise CheckpointError(f"{where}: {tensor.name} is {tensor.dtype}, expected {' or '.join(dtypes)}")
        if tensor is not None and len(tensor.shape) != (1 if tensor is g_idx else 2):
            raise CheckpointError(f"{where}: {tensor.name} has shape {list(tensor.shape)}")


def _mismatch(where: Path, tensor: LazyTensor, want: tuple[int, ...], why: str) -> CheckpointError:
    return CheckpointError(
        f"{where}: {tensor.name} has shape {list(tensor.shape)}, expected {list(want)} ({why})"
    )


def _awq_shapes(prefix, where, s, qweight, qzeros, scales, g_idx) -> tuple[int, int, int]:
    """(N, K, group) of an AutoAWQ GEMM layer: qweight (K, N/8), qzeros (K/g, N/8), scales (K/g, N)."""
    k, n = qweight.shape[0], qweight.shape[1] * 8
    if g_idx is not None:
        raise CheckpointError(f"{where}: {g_idx.name}: AWQ layers have no g_idx (is this GPTQ?)")
    n_groups = scales.shape[0]
    group = k if s.group_size == -1 else s.group_size or max(1, k // max(n_groups, 1))
    if scales.shape != (k // group, n) or k % group:
        raise _mismatch(where, scales, (k // group, n), f"{k} inputs in groups of {group}, {n} outputs")
    if qzeros.shape != (k // group, n // 8):
        raise _mismatch(where, qzeros, (k // group, n // 8), "one packed zero per group and 8 outputs")
    return n, k, group


def _gptq_shapes(prefix, where, s, qweight, qzeros, scales, g_idx) -> tuple[int, int, int]:
    """(N, K, group) of a GPTQ layer: qweight (K/8, N), qzeros (G, N/8), scales (G, N), g_idx (K,)."""
    k, n = qweight.shape[0] * 8, qweight.shape[1]
    n_groups = scales.shape[0]
    group = k if s.group_size == -1 else s.group_size or math.ceil(k / max(n_groups, 1))
    if g_idx is not None and g_idx.shape != (k,):
        raise _mismatch(where, g_idx, (k,), f"{prefix}.qweight packs {k} inputs")
    want_groups = math.ceil(k / group)  # with act-order too: the groups are counted, only their members move
    if scales.shape != (want_groups, n):
        raise _mismatch(where, scales, (want_groups, n), f"{k} inputs in groups of {group}, {n} outputs")
    if qzeros is not None and (n % 8 or qzeros.shape != (n_groups, n // 8)):
        raise _mismatch(where, qzeros, (n_groups, n // 8), "one packed zero per group and 8 outputs")
    return n, k, group
