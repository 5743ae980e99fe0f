"""The numpy backend: float32 compute on the host, every op from ArrayAPIBackend with xp = numpy.

Quantized GGUF weights stay packed (blazr.quant.QuantWeight): matmul and embed read the blocks with the
numba kernels of blazr.quant.cpu_kernels when numba is installed, else with the numpy reference path.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from blazr.backends.array_api import ArrayAPIBackend
from blazr.backends.base import Array
from blazr.errors import ConfigError
from blazr.quant import DEQUANT_TYPES, QuantRowStack, QuantWeight

# Every GGML block type the numpy dequantizer decodes can be multiplied packed (F16/BF16 are widened at load).
PACKED_FORMATS = tuple(sorted(DEQUANT_TYPES - {"F32", "F16", "BF16"}))
HAS_NUMBA = importlib.util.find_spec("numba") is not None


class Backend(ArrayAPIBackend):
    """`--device cpu`: numpy arrays are the device arrays; dense matmuls go to numpy's BLAS."""

    xp = np
    name = "cpu"
    compute_dtype = "f32"
    act_dtypes = ("f32",)
    weight_formats = PACKED_FORMATS

    def __init__(self, index: int = 0, fast_kernels: bool | None = None, **options):
        """fast_kernels: use the numba kernels (default: when numba is installed); False: numpy reference."""
        if index != 0:
            raise ConfigError(f"--device cpu:{index}: the cpu backend has one device; use --device cpu")
        if options:
            raise ConfigError(f"--device cpu: unknown backend option(s) {sorted(options)}")
        if fast_kernels and not HAS_NUMBA:
            raise ConfigError("fast CPU kernels need numba; install it with: pip install numba")
        self.fast_kernels = HAS_NUMBA if fast_kernels is None else bool(fast_kernels)

    def _quant_module(self, fmt: str):
        """The kernel module for one format: numba kernels where they exist, else the numpy reference."""
        if self.fast_kernels:
            from blazr.quant import cpu_kernels

            if fmt in cpu_kernels.FORMATS:
                return cpu_kernels
        from blazr.quant import reference_matmul

        return reference_matmul

    def supports(self, op: str, dtype: str | None = None, fmt: str | None = None) -> bool:
        # only matmul and embed read weights, so only they take packed formats
        return super().supports(op, dtype, fmt if op in ("matmul", "embed") else fmt and "unsupported")

    def matmul(self, x: Array, w: Array) -> Array:
        if isinstance(w, QuantRowStack):
            return np.concatenate([self.matmul(x, part) for part in w.parts], axis=1)  # (T, N)
        if isinstance(w, QuantWeight):
            return self._quant_module(w.format).matmul(x, w)  # (T, N)
        return super().matmul(x, w)

    def embed(self, table: Array, ids: Array) -> Array:
        if isinstance(table, QuantWeight):
            return self._quant_module(table.format).embed(table, ids)  # (T, K)
        return super().embed(table, ids)
