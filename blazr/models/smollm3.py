"""SmolLM3 (HF SmolLM3ForCausalLM, model_type smollm3; GGUF smollm3): Llama with some layers that use no
positional encoding at all (NoPE). `no_rope_layers[i]` is 1 where layer i uses RoPE; by default every 4th
layer (no_rope_layer_interval) has none. A sliding window applies, with use_sliding_window, to the NoPE layers
only (transformers' layer_types default)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "smollm3"
    no_rope_layers: list[int] | None = None
    no_rope_layer_interval: int = 4

    def __post_init__(self):
        super().__post_init__()
        n = self.num_hidden_layers
        if self.no_rope_layers is None:
            self.no_rope_layers = [int((i + 1) % self.no_rope_layer_interval != 0) for i in range(n)]
        if len(self.no_rope_layers) != n:
            raise UnsupportedError(
                f"no_rope_layers lists {len(self.no_rope_layers)} layers, num_hidden_layers is {n}"
            )
        if self.layer_types is None:
            windowed = self.use_sliding_window and self.sliding_window
            self.layer_types = [
                "sliding_attention" if windowed and not rope else "full_attention"
                for rope in self.no_rope_layers
            ]

    def layer_window(self, layer: int) -> int:
        if not (self.use_sliding_window and self.sliding_window):
            return 0
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else 0


class Model(llama.Model):
    """A SmolLM3 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        inv_freq = self.inv_freq if a.no_rope_layers[layer] else None  # None: a NoPE layer
        attn = Attention(
            be, self.attention_shape, layer, inv_freq, a.layer_window(layer), self.attention_scaling
        )
        mlp = GatedMLP(
            be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_act], layer, a.mlp_bias
        )
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES: dict[str, str] = {}
GGUF_QK_PERMUTED = frozenset({"smollm3"})  # the converter is LlamaModel's, which interleaves q/k rows


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp writes no NoPE pattern and assumes every 4th layer (n_no_rope_layer_step = 4), without a
    sliding window."""
    return config | {
        "model_type": "smollm3",
        "architectures": ["SmolLM3ForCausalLM"],
        "no_rope_layer_interval": 4,
        "sliding_window": None,
    }
