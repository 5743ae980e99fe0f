"""WebGPU adapters: enumeration (`blazr devices`, `--device wgpu:N`), and the device with full limits."""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import numpy as np

from blazr.errors import ConfigError, UnsupportedError

NO_ADAPTER = (
    "no WebGPU adapter found: install a Vulkan driver (e.g. mesa-vulkan-drivers and libvulkan1 on "
    "Debian/Ubuntu, or tools/setup_software_vulkan.sh for a CPU one), or a GPU driver with Vulkan, Metal "
    "or DX12 support"
)
OPTIONAL_FEATURES = ("shader-f16", "subgroup")  # requested when the adapter has them; never required
SHOWN_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-storage-buffers-per-shader-stage",
)


def _wgpu():
    # libwayland in the Vulkan loader prints an error line when this is unset; any private dir silences it.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="blazr-xdg-")
    try:
        import wgpu
    except ImportError:
        raise UnsupportedError(
            "--device wgpu needs the Python package 'wgpu'; install it with: pip install 'blazr[wgpu]'"
        ) from None
    return wgpu


def list_adapters() -> list[Any]:
    """Every adapter wgpu-native finds, in its enumeration order (the N of --device wgpu:N)."""
    try:
        return list(_wgpu().gpu.enumerate_adapters_sync())
    except RuntimeError as e:  # wgpu-native raises when no backend library loads at all
        raise UnsupportedError(f"{NO_ADAPTER} ({e})") from None


def describe(adapter: Any) -> dict[str, Any]:
    """What `blazr devices` prints for one adapter."""
    info = adapter.info
    return {
        "name": info.get("device") or adapter.summary,
        "backend": info.get("backend_type", "?"),
        "type": info.get("adapter_type", "?"),
        "driver": info.get("description", ""),
        "limits": {k: adapter.limits[k] for k in SHOWN_LIMITS if k in adapter.limits},
        "features": sorted(f for f in adapter.features if f in OPTIONAL_FEATURES or "timestamp" in f),
    }


def open_device(index: int, without: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """Adapter `index` and a device on it created with the adapter's full limits and optional features,
    less those named in `without` (so an adapter can stand in for one that lacks them)."""
    adapters = list_adapters()
    if not adapters:
        raise UnsupportedError(NO_ADAPTER)
    if index >= len(adapters):
        raise ConfigError(
            f"--device wgpu:{index}: there are only {len(adapters)} WebGPU adapters "
            f"(0..{len(adapters) - 1}); run `blazr devices` to list them"
        )
    adapter = adapters[index]
    features = [f for f in OPTIONAL_FEATURES if f in adapter.features and f not in without]
    device = adapter.request_device_sync(required_features=features, required_limits=dict(adapter.limits))
    return adapter, device


def adapter_memory(adapter: Any) -> int | None:
    """Bytes the adapter can hold, where it can be known: a CPU adapter (lavapipe, llvmpipe) allocates host
    memory, so physical RAM. WebGPU reports no VRAM size for GPUs: None, and allocation errors say it then."""
    if adapter.info.get("adapter_type") == "CPU" and hasattr(os, "sysconf"):
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return None
    return None


def device_weight_bytes(
    tensors: dict[str, Any], dtype: str, packed_formats: tuple[str, ...], f16_storage: bool = False
) -> int:
    """Bytes the weights take on the device: packed formats at their block size, the rest dense in dtype.
    With f16_storage (f32 compute on an adapter without shader-f16), a 2-d F16 weight keeps 2 bytes a value:
    Backend.upload stores it as packed halves."""
    from blazr.quant import row_bytes

    itemsize = {"f16": 2, "bf16": 2}.get(dtype, 4)
    total = 0
    for tensor in tensors.values():
        shape = tuple(int(n) for n in tensor.shape)
        fmt = getattr(tensor, "dtype", None)
        # 2-D weights and 3-D experts (E, N, K) stay in their blocks
        packed = getattr(tensor, "quantized", False) and len(shape) in (2, 3) and fmt in packed_formats
        if packed and dtype == "f32":
            total += math.prod(shape[:-1]) * row_bytes(fmt, shape[-1])
        elif f16_storage and dtype == "f32" and len(shape) == 2 and _is_f16(fmt):
            total += math.prod(shape) * 2
        else:
            total += math.prod(shape) * itemsize
    return total


def _is_f16(fmt: Any) -> bool:
    """A checkpoint dtype name ("F16") or a numpy dtype (a host array) that is IEEE half."""
    if isinstance(fmt, str):
        return fmt == "F16"
    return fmt is not None and np.dtype(fmt) == np.float16
