"""Qwen3 dense decoders (HF model_type qwen3): Qwen2's layout without q/k/v biases, and an RMSNorm over each
query and key head before RoPE (qk-norm). The Llama family's model runs it; only the config differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.models import llama


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "qwen3"
    head_dim: int | None = 128  # Qwen3 configs give it; 128 is transformers' default when they do not

    @property
    def qk_norm_eps(self) -> float | None:
        return self.rms_norm_eps

    def layer_window(self, layer: int) -> int:
        """As transformers' Qwen3Config: a window only with use_sliding_window, on layers from
        max_window_layers on unless layer_types names them."""
        if not (self.use_sliding_window and self.sliding_window):
            return 0
        if self.layer_types is not None:
            return self.sliding_window if self.layer_types[layer] == "sliding_attention" else 0
        return self.sliding_window if layer >= self.max_window_layers else 0


class Model(llama.Model):
    """The Llama-family model; ModelArgs.qk_norm_eps gives its attention the q/k norms."""


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.attn_q_norm": "model.layers.{N}.self_attn.q_norm",
    "blk.{N}.attn_k_norm": "model.layers.{N}.self_attn.k_norm",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # llama.cpp's converter keeps Qwen's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    return config | {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
