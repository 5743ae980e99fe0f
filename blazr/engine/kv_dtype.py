"""The KV cache's element type (--kv-cache-type): f32, f16, or auto.

Keys and values are the largest memory a server holds after the weights (SmolLM2-135M: 46 KB a token in
float32, so 16 sequences of 1024 tokens take 750 MB). float16 halves that, as llama.cpp (`-ctk/-ctv f16`,
its default) and Ollama (OLLAMA_KV_CACHE_TYPE, default f16) do. Its rounding (relative 2^-11 per element)
is well under what int8 activations already cost, so `auto` takes float16 where the CPU backend rounds the
activations to int8 for the model's packed weights (the default for quantized GGUF files), and keeps the
model's own dtype where it computes in exact float (a float32 checkpoint, or --dtype f32).

Models whose cache is paged keys and values per layer (blazr.models.decoder.DecoderLM and the hybrids)
take it through their `kv_dtype` attribute (KV_DTYPE_CHOICE); others (latent attention, pure state-space
models) keep the model's dtype, and asking them for another is an error naming the flag.
"""

from __future__ import annotations

from typing import Any

from blazr.errors import ConfigError

KV_CACHE_TYPES = ("auto", "f32", "f16")


def choose_kv_dtype(model: Any, backend: Any, kind: str | None) -> str:
    """Set the dtype of the model's KV cache for `kind` (None: auto); returns the dtype its caches take."""
    kind = kind or "auto"
    if kind not in KV_CACHE_TYPES:
        raise ConfigError(f"--kv-cache-type {kind!r} is unknown; use one of {', '.join(KV_CACHE_TYPES)}")
    own = getattr(model, "dtype", "f32")
    settable = bool(getattr(model, "KV_DTYPE_CHOICE", False))
    if kind == "auto":
        kind = "f16" if settable and backend.name == "cpu" and rounds_to_int8(model, backend) else own
    if kind == own:
        if settable:
            model.kv_dtype = None  # the model's own dtype
        return own
    if not settable:
        raise ConfigError(
            f"--kv-cache-type {kind}: this model's cache ({type(model).__name__}) keeps the model's dtype "
            f"({own}); leave --kv-cache-type unset"
        )
    if backend.name != "cpu":
        raise ConfigError(
            f"--kv-cache-type {kind}: device {backend.name} keeps the KV cache in the model's dtype ({own}); "
            f"load the model with --dtype {kind} instead"
        )
    model.kv_dtype = kind
    return kind


def rounds_to_int8(model: Any, backend: Any) -> bool:
    """Whether the backend rounds this model's activations to int8: it does for packed weights of the int8
    formats when int8 activations are on (the CPU backend's default). The first layer speaks for the model: a
    GGUF file packs every layer's projections alike."""
    if not getattr(backend, "int8_activations", False) or not getattr(backend, "fast_kernels", False):
        return False
    from blazr.quant import QuantWeight
    from blazr.quant.cpu_kernels import INT8_FORMATS

    layer = model.layers[0] if getattr(model, "layers", None) else None
    return any(
        isinstance(weight, QuantWeight) and weight.format in INT8_FORMATS
        for weight in _weights(layer, depth=3)
    )


def _weights(obj: Any, depth: int):
    """The packed weights (blazr.quant objects) held by one layer's modules, a few attributes deep."""
    if obj is None or depth < 0:
        return
    for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
        if type(value).__module__.startswith("blazr.quant"):
            yield value
        elif type(value).__module__.startswith("blazr.models"):
            yield from _weights(value, depth - 1)
