"""Shared model plumbing: config dataclasses from HF dicts, the trace() hook, and strict weight checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from blazr.errors import CheckpointError
from blazr.models.batch import ForwardBatch

Array = Any  # a backend's array handle

# HF hidden_act -> backend activation kind
HF_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


@dataclasses.dataclass
class BaseModelArgs:
    """A model config built from a Hugging Face config dict. Unknown keys are ignored."""

    ALIASES: ClassVar[dict[str, str]] = {}  # other HF spellings of a field -> the field name

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]):
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {key: value for key, value in config.items() if key in fields}
        for alias, name in cls.ALIASES.items():
            # the canonical spelling wins over an alias when a config has both
            if alias in config and name not in kwargs:
                kwargs[name] = config[alias]
        return cls(**kwargs)


# ---- trace hook ---------------------------------------------------------------------------------------

_tracer: Callable[[str, int, Array], None] | None = None


def trace(name: str, layer: int, x: Array) -> None:
    """Called at each named intermediate (layer -1 outside the layer stack). A no-op unless recording."""
    if _tracer is not None:
        _tracer(name, layer, x)


@contextmanager
def record_trace(backend) -> Iterator[dict[tuple[str, int], np.ndarray]]:
    """Record every traced intermediate as a host array, keyed by (name, layer); the last call wins.

    Used to bisect a parity bug layer by layer: `with record_trace(be) as rec: model(batch, cache)`.
    """
    global _tracer
    records: dict[tuple[str, int], np.ndarray] = {}
    previous = _tracer

    def record(name: str, layer: int, x: Array) -> None:
        records[(name, layer)] = np.array(backend.download(x), copy=True)

    _tracer = record
    try:
        yield records
    finally:
        _tracer = previous


# ---- per-step inputs ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    """One ForwardBatch's index arrays on the device, uploaded once and shared by every layer."""

    positions: Array  # (T,) int32
    slots: Array  # (T,) int32
    block_tables: Array  # (B, max_blocks) int32
    ctx_lens: Array  # (B,) int32
    q_lens: Array  # (B,) int32
    block_size: int
    num_tokens: int
    state_slots: Array | None = None  # (B,) int32 recurrent-state slot of each sequence, or None
    fresh: Array | None = None  # (B,) int32 1 where a sequence starts in this step (zero state)


def upload_batch(backend, batch: ForwardBatch) -> tuple[Step, Array | None]:
    """The batch's index arrays on the device, and its logits rows (None when every row is wanted)."""
    up, t = backend.upload, len(batch.token_ids)
    tables, ctx_lens, q_lens = up(batch.block_tables), up(batch.ctx_lens), up(batch.q_lens)
    step = Step(up(batch.positions), up(batch.slots), tables, ctx_lens, q_lens, int(batch.block_size), t)
    if batch.state_slots is not None:
        step.state_slots, step.fresh = up(batch.state_slots), up(batch.fresh)
    every_row = len(batch.logits_rows) == t and bool((batch.logits_rows == np.arange(t)).all())
    return step, None if every_row else up(batch.logits_rows)


# ---- weights ------------------------------------------------------------------------------------------


def host_array(tensor) -> np.ndarray:
    """A checkpoint tensor (LazyTensor or numpy array) as a dense host array."""
    return tensor if isinstance(tensor, np.ndarray) else tensor.load()


class WeightUploader:
    """tensor -> backend weight. A quantized 2-D tensor whose format the backend multiplies packed (matmul
    and embed) stays in its blocks (a QuantWeight); anything else is dequantized and uploaded dense."""

    def __init__(self, backend, dtype: str):
        self.backend, self.dtype = backend, dtype

    def __call__(self, tensor) -> Array:
        if self.keeps_packed(tensor):
            return self.packed(tensor)
        if self.keeps_experts_packed(tensor):
            for fmt in tensor.formats:
                self.backend.hold_packed(fmt)
            return tensor.packed()  # a QuantExperts
        return self.backend.upload(host_array(tensor), self.dtype)

    def packed(self, tensor):
        """The QuantWeight of a tensor keeps_packed accepted, the backend told of its format."""
        self.backend.hold_packed(tensor.dtype)
        return packed_weight(tensor)

    def keeps_experts_packed(self, tensor) -> bool:
        """A mixture's stacked experts (blazr.models.layers.stacked_experts) whose every format the backend
        multiplies packed in matmul_experts."""
        if not (hasattr(tensor, "packed") and getattr(tensor, "quantized", False)):
            return False
        return all(self.backend.supports("matmul_experts", self.dtype, fmt) for fmt in tensor.formats)

    def keeps_packed(self, tensor) -> bool:
        fmt, shape = getattr(tensor, "dtype", None), getattr(tensor, "shape", ())
        if not (getattr(tensor, "quantized", False) and hasattr(tensor, "load_blocks") and len(shape) == 2):
            return False
        be = self.backend
        return be.supports("matmul", self.dtype, fmt) and be.supports("embed", self.dtype, fmt)


def weight_uploader(backend, dtype: str) -> WeightUploader:
    return WeightUploader(backend, dtype)


def packed_weight(tensor):
    from blazr.quant import QuantWeight

    # input_perm: the packed column order of a GPTQ act-order weight (blazr.loaders.awq_gptq), else None
    perm = getattr(tensor, "input_perm", None)
    return QuantWeight(tensor.load_blocks(), tensor.dtype, tuple(tensor.shape), perm)


def load_tensor(get: Callable[[str], Any], name: str, upload: Callable[[Any], Array]) -> Array:
    """`upload` takes the checkpoint tensor (weight_uploader) or, from older callers, a host array."""
    tensor = get(name)
    return upload(tensor if isinstance(upload, WeightUploader) else host_array(tensor))


def load_fused(get: Callable[[str], Any], names: list[str], upload: Callable[[Any], Array]) -> Array:
    """Rows of several HF tensors stacked into one, so one matmul (or add) does the work of several.

    Packed parts stay packed (formats that differ, as in Q4_K_M's Q4_K q/k and Q6_K v, become a row stack
    the backend multiplies part by part); if any part must be dense, every part is dequantized."""
    tensors = [get(n) for n in names]
    if isinstance(upload, WeightUploader) and all(upload.keeps_packed(t) for t in tensors):
        from blazr.quant import QuantRowStack, stack_rows

        fused = stack_rows([upload.packed(t) for t in tensors])
        if not isinstance(fused, QuantRowStack):  # a concatenated copy: the mapped originals are unused now
            for t in tensors:
                t.release()
        return fused
    stacked = np.concatenate([host_array(t) for t in tensors], axis=0)
    for t in tensors:  # the mapped originals are unused now: keep resident memory near one copy
        release = getattr(t, "release", None)
        if release is not None:
            release()
    return upload(stacked)


def _where(tensor, source: Path | str | None) -> str:
    found = getattr(tensor, "source", None) if tensor is not None else None
    return str(found or source or "the checkpoint")


def check_weights(
    weights: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], source: Path | str | None = None
) -> None:
    """Strict load check: every expected tensor present with its shape, and nothing else.

    Raises CheckpointError naming the tensor and the checkpoint file.
    """
    for name, shape in expected.items():
        if name not in weights:
            raise CheckpointError(f"{_where(None, source)}: missing tensor {name!r} (expected shape {shape})")
        actual = tuple(weights[name].shape)
        if actual != tuple(shape):
            where = _where(weights[name], source)
            raise CheckpointError(f"{where}: tensor {name!r} has shape {actual}, expected {tuple(shape)}")
    for name in weights:
        if name not in expected:
            raise CheckpointError(
                f"{_where(weights[name], source)}: unexpected tensor {name!r} (not used by this architecture)"
            )
