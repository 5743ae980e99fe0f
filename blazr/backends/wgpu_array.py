"""WgpuArray: the wgpu backend's array handle, a strided view (offset, shape, strides) into a device buffer.

Views let model code reshape and slice (`qkv[:, a:b]`) without copies: kernels take each input's element
offset and row stride. Kernels that need a fully contiguous input get one through Backend.contiguous().
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError

ITEMSIZE = {"f32": 4, "f16": 2, "i32": 4}
NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32}


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class GpuBuffer:
    """A device buffer from the runtime's pool; it goes back to the pool when no array refers to it."""

    __slots__ = ("gpu", "nbytes", "serial", "pool")

    def __init__(self, gpu: Any, nbytes: int, serial: int, pool: Any):
        self.gpu, self.nbytes, self.serial, self.pool = gpu, nbytes, serial, pool

    def __del__(self):
        pool = self.pool
        if pool is not None:
            self.pool = None
            try:
                pool.release(self.gpu, self.nbytes, self.serial)
            except Exception:  # interpreter shutdown: the pool may already be gone
                pass


class WgpuArray:
    """A typed view of a GpuBuffer. `host` keeps the uploaded values of small int arrays (positions,
    lengths) so ops that plan on the host (rope tables) need no read-back."""

    __slots__ = ("buf", "offset", "shape", "strides", "dtype", "host", "backend")

    def __init__(self, backend, buf: GpuBuffer, shape, dtype: str, offset: int = 0, strides=None, host=None):
        self.backend, self.buf, self.dtype, self.offset = backend, buf, dtype, int(offset)
        self.shape = tuple(int(n) for n in shape)
        self.strides = c_strides(self.shape) if strides is None else tuple(strides)
        self.host = host

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def contiguous(self) -> bool:
        return all(
            s == c for s, c, n in zip(self.strides, c_strides(self.shape), self.shape, strict=True) if n > 1
        )

    @property
    def rows_contiguous(self) -> bool:
        """Contiguous within each row (all axes but the first): the layout every row-wise kernel accepts."""
        inner = self.shape[1:]
        return all(s == c for s, c, n in zip(self.strides[1:], c_strides(inner), inner, strict=True) if n > 1)

    @property
    def row_stride(self) -> int:
        """Elements between rows (first axis); for a 1-row view any value works."""
        return self.strides[0] if self.ndim and self.shape[0] > 1 else math.prod(self.shape[1:])

    def view(self, shape, offset: int | None = None, strides=None, host=None) -> WgpuArray:
        base = self.offset if offset is None else offset
        return WgpuArray(self.backend, self.buf, shape, self.dtype, base, strides, host)

    def reshape(self, *shape) -> WgpuArray:
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
        shape = list(shape)
        if shape.count(-1) == 1:
            known = math.prod(n for n in shape if n != -1)
            shape[shape.index(-1)] = self.size // max(known, 1)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape an array of shape {self.shape} into {tuple(shape)}")
        source = self if self.contiguous else self.backend.contiguous(self)
        host = None if self.host is None else self.host.reshape(shape)
        return source.view(tuple(shape), host=host)

    def __getitem__(self, key) -> WgpuArray:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > self.ndim:
            raise IndexError(f"too many indices for an array of shape {self.shape}")
        offset, shape, strides = self.offset, [], []
        for axis, (n, stride) in enumerate(zip(self.shape, self.strides, strict=True)):
            k = key[axis] if axis < len(key) else slice(None)
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                offset += start * stride
                shape.append(max(0, -(-(stop - start) // step)))
                strides.append(stride * step)
            elif isinstance(k, int | np.integer):
                offset += (int(k) + n if k < 0 else int(k)) * stride
            else:
                raise UnsupportedError(f"wgpu arrays take int and slice indices, not {type(k).__name__}")
        host = None if self.host is None else self.host[key]
        return self.view(tuple(shape), offset, tuple(strides), host)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (
            f"WgpuArray(shape={self.shape}, dtype={self.dtype}, offset={self.offset}, strides={self.strides})"
        )


class RowChunks:
    """A 2-d weight larger than one binding may be (max-storage-buffer-binding-size), kept as consecutive
    row blocks in separate buffers. matmul and embed run once per block; other ops refuse it."""

    def __init__(self, parts: list[WgpuArray]):
        self.parts = parts
        self.starts = [0]
        for part in parts:
            self.starts.append(self.starts[-1] + part.shape[0])
        self.shape = (self.starts[-1], parts[0].shape[1])
        self.dtype = parts[0].dtype
        self.ndim = 2
        self.format = "row-split dense"

    def __len__(self) -> int:
        return self.shape[0]
