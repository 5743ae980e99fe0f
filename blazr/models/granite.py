"""IBM Granite 3.x dense decoders (HF GraniteForCausalLM, model_type granite; GGUF granite).

The Llama layout with four multipliers: embeddings times embedding_multiplier, attention and MLP outputs times
residual_multiplier before they join the residual, q.k scaled by attention_multiplier (instead of
1/sqrt(Dh)), and logits divided by logits_scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.models import llama
from blazr.models.decoder import PreNormBlock


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "granite"
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float = 1.0
    logits_scaling: float = 1.0

    @property
    def attention_scale(self) -> float:
        return self.attention_multiplier


class Model(llama.Model):
    """A Granite causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        d, dt = args.hidden_size, dtype or "f32"
        # (D,) vectors so the backend's broadcasting multiply applies the scalars
        self.residual_scale = backend.upload(np.full(d, args.residual_multiplier, np.float32), dt)
        super().__init__(args, backend, dtype)
        self.embed_scale = backend.upload(np.full(d, args.embedding_multiplier, np.float32), self.dtype)
        self.scale_logits(1.0 / args.logits_scaling)

    def make_block(self, layer: int) -> PreNormBlock:
        block = super().make_block(layer)
        block.residual_scale = self.residual_scale
        return block


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES: dict[str, str] = {}
GGUF_QK_PERMUTED = frozenset({"granite"})  # the converter is LlamaModel's, which interleaves q/k rows


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's granite keys: attention.scale, embedding_scale, residual_scale, logit_scale (logits are
    divided by it, as transformers' logits_scaling)."""
    return config | {
        "model_type": "granite",
        "architectures": ["GraniteForCausalLM"],
        "attention_multiplier": float(get("attention.scale", 1.0)),
        "embedding_multiplier": float(get("embedding_scale", 1.0)),
        "residual_multiplier": float(get("residual_scale", 1.0)),
        "logits_scaling": float(get("logit_scale")),  # llama.cpp requires it too
    }
