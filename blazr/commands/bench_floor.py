"""The memory-bandwidth floor of a decode step, for `blazr bench`: weight bytes one token reads ÷ the device's
copy bandwidth, measured here on the model's own device.

A decode step of a dense model reads every weight once (the embedding table only for its one row, unless the
LM head is the same tensor), so no runtime decodes faster than bytes ÷ bandwidth; the share of that floor a
runtime reaches says how much of its time goes to anything but moving weights.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def weight_bytes(model: Any) -> int:
    """Bytes of every weight array the model holds, packed weights at their packed size, each counted once;
    an untied embedding table is left out (a token reads one of its rows)."""
    seen: set[int] = set()
    embed, head = getattr(model, "embed_tokens", None), getattr(model, "lm_head", None)
    skip = embed if head is not None and head is not embed else None  # a tied table is the LM head too
    return _walk(model, seen, skip, depth=0)


def _walk(obj: Any, seen: set[int], skip: Any, depth: int) -> int:
    if (
        obj is None
        or obj is skip
        or id(obj) in seen
        or depth > 8
        or isinstance(obj, str | bytes | int | float)
    ):
        return 0
    seen.add(id(obj))
    nbytes = _array_bytes(obj)
    if nbytes is not None:
        return nbytes
    if isinstance(obj, list | tuple):
        return sum(_walk(item, seen, skip, depth + 1) for item in obj)
    if isinstance(obj, dict):
        return sum(_walk(item, seen, skip, depth + 1) for item in obj.values())
    fields = getattr(obj, "__dict__", None)
    if fields is None or type(obj).__module__.split(".")[0] != "blazr":
        return 0  # only walk blazr's own objects (layers, weights), never the backend or foreign libraries
    return sum(
        _walk(value, seen, skip, depth + 1) for name, value in fields.items() if name not in ("be", "args")
    )


def _array_bytes(obj: Any) -> int | None:
    """Bytes of one weight-like object, or None when it is not one."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    kind = type(obj).__name__
    if kind in ("QuantWeight", "QuantRowStack"):
        return int(obj.nbytes)
    if kind == "WgpuArray":
        return int(obj.size * obj.itemsize)
    if kind == "RowChunks":
        return sum(int(p.size * p.itemsize) for p in obj.parts)
    return None


def copy_bandwidth(backend: Any) -> float:
    """Bytes/s (read + write counted) of a large copy in the backend's memory: device buffers on wgpu,
    host arrays otherwise."""
    measure = getattr(getattr(backend, "rt", None), "copy_bandwidth", None)
    if measure is not None:
        return float(measure())
    src = np.ones(1 << 28, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.nbytes / best
