"""The numpy backend: float32 compute on the host, every op from ArrayAPIBackend with xp = numpy."""

from __future__ import annotations

import numpy as np

from blazr.backends.array_api import ArrayAPIBackend
from blazr.errors import ConfigError


class Backend(ArrayAPIBackend):
    """`--device cpu`: numpy arrays are the device arrays; matmuls go to numpy's BLAS."""

    xp = np
    name = "cpu"
    compute_dtype = "f32"
    act_dtypes = ("f32",)
    weight_formats = ()  # quantized matmul comes later; GGUF weights are dequantized to f32 at load

    def __init__(self, index: int = 0, **options):
        if index != 0:
            raise ConfigError(f"--device cpu:{index}: the cpu backend has one device; use --device cpu")
        if options:
            raise ConfigError(f"--device cpu: unknown backend option(s) {sorted(options)}")
