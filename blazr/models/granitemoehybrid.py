"""IBM Granite 4.0-H (HF GraniteMoeHybridForCausalLM, model_type granitemoehybrid; GGUF granitehybrid).

Granite's multipliers (blazr.models.granite) on a hybrid of Mamba2 mixers and attention (layer_types "mamba" /
"attention"; transformers' spelling "linear_attention" for Mamba), usually without positions (NoPE;
position_embedding_type "rope" turns RoPE on). After each mixer, x + residual_multiplier * (MoE(h) +
shared_mlp(h)) with h = post_attention_layernorm(x), or shared_mlp(h) alone when num_local_experts is 0
(Granite-4.0-H-Micro). The shared MLP stores gate and up rows as one `input_linear`; the experts as
granitemoe's (blazr.models.granitemoe). The cache is a hybrid's (blazr.models.hybrid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, ConfigError
from blazr.models import granite, granitemoe
from blazr.models.base import HF_ACTIVATIONS, host_array
from blazr.models.decoder import PreNormBlock
from blazr.models.hybrid import HybridLM, MambaArgs, gguf_mamba_config
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.moe import GGUF_EXPERT_NAMES, SparseMoE, check_routing
from blazr.models.layers.ssm import Mamba2Mixer

MAMBA_TYPES = ("mamba", "linear_attention")  # the released configs' word, and transformers' own


@dataclass
class ModelArgs(granite.ModelArgs, MambaArgs):
    model_type: str = "granitemoehybrid"
    max_position_embeddings: int = 131072
    layer_types: list[str] | None = None
    position_embedding_type: str | None = None  # "rope", else no positions at all
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    shared_intermediate_size: int = 1024

    def __post_init__(self):
        super().__post_init__()
        self.check_mamba()
        if self.layer_types is None:
            self.layer_types = ["mamba"] * self.num_hidden_layers
        if len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(
                f"layer_types lists {len(self.layer_types)} layers, num_hidden_layers is {self.num_hidden_layers}"
            )
        if self.num_local_experts:
            check_routing(self.num_local_experts, self.num_experts_per_tok, "num_local_experts")

    def is_attention(self, layer: int) -> bool:
        return self.layer_types[layer] not in MAMBA_TYPES

    def layer_window(self, layer: int) -> int:
        return 0


class Model(HybridLM, granite.Model):
    """A Granite-4.0-H causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        act = HF_ACTIVATIONS[a.hidden_act]
        if a.num_local_experts:
            # transformers' router: softmax over the top-k logits == the renormalised top k of the softmax
            mlp = SparseMoE(
                be,
                a.hidden_size,
                a.intermediate_size,
                a.num_local_experts,
                a.num_experts_per_tok,
                act,
                layer,
                norm_topk_prob=True,
                shared_ffn=a.shared_intermediate_size,
                shared_name="shared_mlp.",
                shared_gated=False,
            )
        else:
            mlp = GatedMLP(be, a.hidden_size, a.shared_intermediate_size, act, layer)
        norms = self.make_norm(a.hidden_size), self.make_norm(a.hidden_size)
        if a.is_attention(layer):
            inv_freq = self.inv_freq if a.position_embedding_type == "rope" else None  # None: NoPE
            mixer = Attention(be, self.attention_shape, layer, inv_freq, 0, self.attention_scaling)
            names = ("input_layernorm.", "self_attn.", "post_attention_layernorm.", "mlp.")
        else:
            mixer = Mamba2Mixer(be, a.ssm_shape, layer)
            names = ("input_layernorm.", "mamba.", "post_attention_layernorm.", "mlp.")
        return PreNormBlock(layer, mixer, mlp, *norms, names=names, residual_scale=self.residual_scale)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        shared = "mlp.shared_mlp." if self.args.num_local_experts else "mlp."
        out: dict[str, Any] = {}
        for name, tensor in weights.items():
            if name.endswith("shared_mlp.input_linear.weight"):  # (2F, D): gate rows, then up rows
                prefix = name.removesuffix("shared_mlp.input_linear.weight") + shared
                out |= split_gate_up(name, tensor, self.args.shared_intermediate_size, prefix)
                continue
            # Bamba's spelling of the same parts, which llama.cpp's granitehybrid table gives
            name = name.replace("shared_mlp.output_linear.", shared + "down_proj.")
            name = name.replace(".pre_ff_layernorm.", ".post_attention_layernorm.")
            name = name.replace(".feed_forward.", "." + shared)
            name = name.replace("model.final_layernorm.", "model.norm.")
            out[name] = tensor
        if self.args.num_local_experts:
            return super().sanitize(granitemoe.rename_experts(out, self.args.num_local_experts))
        return super().sanitize(out)


def split_gate_up(name: str, tensor: Any, ffn: int, prefix: str) -> dict[str, Any]:
    """A fused (2F, D) gate|up matrix as `<prefix>gate_proj.weight` and `<prefix>up_proj.weight`."""
    if tuple(tensor.shape)[0] != 2 * ffn:
        raise CheckpointError(
            f"{name} has {tuple(tensor.shape)[0]} rows but 2 * shared_intermediate_size is {2 * ffn}"
        )
    fused = host_array(tensor)  # (2F, D)
    gate, up = np.ascontiguousarray(fused[:ffn]), np.ascontiguousarray(fused[ffn:])
    return {prefix + "gate_proj.weight": gate, prefix + "up_proj.weight": up}


# ---- GGUF ---------------------------------------------------------------------------------------------------

# Granite-4.0-H's parts in llama.cpp's granitehybrid table (blazr.models.bamba reads every granitehybrid file)
GGUF_GRANITE_NAMES = GGUF_EXPERT_NAMES | {
    "blk.{N}.ffn_gate_shexp": "model.layers.{N}.mlp.shared_mlp.gate_proj",
    "blk.{N}.ffn_up_shexp": "model.layers.{N}.mlp.shared_mlp.up_proj",
    "blk.{N}.ffn_down_shexp": "model.layers.{N}.mlp.shared_mlp.down_proj",
}


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """Granite's multiplier keys and the hybrid's (blazr.models.hybrid); rope.scaling.finetuned says whether
    attention has RoPE (llama.cpp's converter writes true for Bamba only)."""
    mamba = gguf_mamba_config(get, config)
    attention = set(mamba.pop("attn_layer_indices"))
    return (
        granite.gguf_config(arch, get, config)
        | mamba
        | {
            "model_type": "granitemoehybrid",
            "architectures": ["GraniteMoeHybridForCausalLM"],
            "layer_types": [
                "attention" if i in attention else "mamba" for i in range(config["num_hidden_layers"])
            ],
            "position_embedding_type": "rope" if get("rope.scaling.finetuned", False) else "nope",
            "shared_intermediate_size": int(get("expert_shared_feed_forward_length", 0))
            or config["intermediate_size"],
        }
    )
