"""Bamba (HF BambaForCausalLM, model_type bamba; GGUF granitehybrid): a hybrid of Mamba2 mixers and attention.

Every layer is x + mixer(input_layernorm(x)), then x + MLP(pre_ff_layernorm(x)), where the mixer is Llama-style
attention on the layers of attn_layer_indices and a Mamba2 mixer (blazr.models.layers.ssm) on the others.
Attention rotates half of each head (transformers fixes partial_rotary_factor at 0.5 for Bamba). The cache
mixes both kinds (blazr.models.hybrid), so the engine batches a hybrid like any model, with a state slot per
running sequence (blazr.models.cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from blazr.errors import ConfigError
from blazr.models import granitemoehybrid, llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.granitemoehybrid import GGUF_GRANITE_NAMES
from blazr.models.hybrid import GGUF_MAMBA_NAMES, HybridLM, MambaArgs, gguf_mamba_config
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.ssm import Mamba2Mixer

ATTENTION_NAMES = ("input_layernorm.", "self_attn.", "pre_ff_layernorm.", "feed_forward.")
MAMBA_NAMES = ("input_layernorm.", "mamba.", "pre_ff_layernorm.", "feed_forward.")


@dataclass
class ModelArgs(llama.ModelArgs, MambaArgs):
    model_type: str = "bamba"
    max_position_embeddings: int = 262144
    partial_rotary_factor: float = 0.5
    attn_layer_indices: list[int] = field(default_factory=list)

    def __post_init__(self):
        super().__post_init__()
        self.partial_rotary_factor = 0.5  # transformers' BambaConfig sets it whatever the config says
        self.check_mamba()
        bad = [i for i in self.attn_layer_indices if not 0 <= i < self.num_hidden_layers]
        if bad:
            raise ConfigError(
                f"attn_layer_indices names layer {bad[0]}, outside 0..{self.num_hidden_layers - 1}"
            )

    def is_attention(self, layer: int) -> bool:
        return layer in self.attn_layer_indices


class Model(HybridLM, llama.Model):
    """A Bamba causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    NORM = "model.final_layernorm."

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        mlp = GatedMLP(
            be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_act], layer, a.mlp_bias
        )
        norms = self.make_norm(a.hidden_size), self.make_norm(a.hidden_size)
        if a.is_attention(layer):
            attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
            return PreNormBlock(layer, attn, mlp, *norms, names=ATTENTION_NAMES)
        return PreNormBlock(layer, Mamba2Mixer(be, a.ssm_shape, layer), mlp, *norms, names=MAMBA_NAMES)


# ---- GGUF ---------------------------------------------------------------------------------------------------

# one table for every granitehybrid file: Bamba's names and Granite-4.0-H's (blazr.models.granitemoehybrid)
GGUF_TENSOR_NAMES = (
    GGUF_MAMBA_NAMES
    | GGUF_GRANITE_NAMES
    | {
        "output_norm": "model.final_layernorm",
        "blk.{N}.ffn_norm": "model.layers.{N}.pre_ff_layernorm",
        "blk.{N}.ffn_gate": "model.layers.{N}.feed_forward.gate_proj",
        "blk.{N}.ffn_up": "model.layers.{N}.feed_forward.up_proj",
        "blk.{N}.ffn_down": "model.layers.{N}.feed_forward.down_proj",
    }
)
GGUF_QK_PERMUTED = frozenset({"granitehybrid"})  # the converter's LlamaModel.permute, undone by the loader


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp writes Bamba and Granite-4.0-H as granitehybrid: a file with RoPE and none of Granite's
    multipliers or experts is Bamba; the others go to blazr.models.granitemoehybrid."""
    if not get("rope.scaling.finetuned", True) or get("expert_count", 0) or get("embedding_scale", None):
        return granitemoehybrid.gguf_config(arch, get, config)
    return (
        config
        | gguf_mamba_config(get, config)
        | {"model_type": "bamba", "architectures": ["BambaForCausalLM"]}
    )
