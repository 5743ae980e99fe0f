"""Model registry: HF architecture names -> model modules (imported lazily), and `build_model`.

ARCHITECTURES is keyed by HF `architectures[0]`; REMAP covers configs without one (HF `model_type` or GGUF
`general.architecture`). Values are module names under blazr.models.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from blazr.errors import ConfigError, UnsupportedError

ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
}

REMAP: dict[str, str] = {
    "llama": "llama",
    "llama2": "llama",
    "llama3": "llama",
    "mistral": "llama",
    "qwen2": "llama",
}

COMPUTE_DTYPES = ("f32", "f16", "bf16", "q8")


def model_module_name(config: dict[str, Any], gguf_metadata: dict[str, Any] | None = None) -> str:
    """The blazr.models module for a config: by architectures[0], else by model_type / GGUF architecture."""
    architectures = config.get("architectures") or []
    if architectures:
        if architectures[0] in ARCHITECTURES:
            return ARCHITECTURES[architectures[0]]
        name = architectures[0]
    else:
        name = config.get("model_type") or (gguf_metadata or {}).get("general.architecture") or ""
        if name in REMAP:
            return REMAP[name]
    raise UnsupportedError(
        f"model architecture {name or '(none given)'!r} is not supported; supported: "
        f"{', '.join(sorted(ARCHITECTURES))} (model_type {', '.join(sorted(REMAP))})"
    )


def get_model_module(config: dict[str, Any], gguf_metadata: dict[str, Any] | None = None) -> ModuleType:
    return importlib.import_module(f"blazr.models.{model_module_name(config, gguf_metadata)}")


def build_model(ckpt, backend, dtype: str | None = None):
    """A loaded model for Checkpoint `ckpt` on `backend`, activations in `dtype` (default "f32").

    Fails before reading any weight when the backend lacks an op/dtype the model needs (UnsupportedError),
    and on a missing, unexpected or wrongly shaped tensor (CheckpointError).
    """
    from blazr.backends.base import check_supports

    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is unknown; use one of {', '.join(COMPUTE_DTYPES)}")
    # q8: float32 activations, rounded to int8 for the dot products with packed weights (a CPU backend
    # choice). Unset keeps each backend's default (the CPU rounds, as llama.cpp does); an explicit float
    # dtype asks for exact float activations everywhere.
    set_int8 = getattr(backend, "set_int8_activations", None)
    if dtype == "q8" and set_int8 is None:
        raise UnsupportedError(
            f"--dtype q8 (int8 activations) is a cpu backend option; device {backend.name} "
            "computes in f32 or f16"
        )
    if set_int8 is not None and dtype is not None:
        set_int8(dtype == "q8")
    dtype = "f32" if dtype in (None, "q8") else dtype
    module = get_model_module(ckpt.config, ckpt.gguf_metadata)
    model = module.Model(module.ModelArgs.from_dict(ckpt.config), backend, dtype)
    check_supports(backend, model.required_ops())
    weights = model.sanitize(dict(ckpt.tensors))
    fits = getattr(backend, "check_model_fits", None)
    if fits is not None:  # a backend that knows its memory refuses a model too big before any upload
        fits(weights, dtype)
    model.load_weights(weights, source=ckpt.path)
    return model
