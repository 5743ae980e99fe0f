"""Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B) decoders (HF Qwen2MoeForCausalLM, model_type qwen2_moe; GGUF
qwen2moe).

Qwen2's attention (q/k/v biases) and pre-norm blocks; the MLP of every decoder_sparse_step-th layer (not in
mlp_only_layers) is a SparseMoE of num_experts experts of moe_intermediate_size, num_experts_per_tok per token
(renormalised only with norm_topk_prob), plus a shared expert of shared_expert_intermediate_size scaled by
sigmoid(shared_expert_gate(x)); the other layers have a dense MLP of intermediate_size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS, host_array
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.moe import GGUF_EXPERT_NAMES, SparseMoE, check_routing, stack_experts


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "qwen2_moe"
    intermediate_size: int = 5632  # of the dense MLP layers
    num_experts: int = 60
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 1408
    shared_expert_intermediate_size: int = 5632
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = field(default_factory=list)
    qkv_bias_: bool = True

    ALIASES = llama.ModelArgs.ALIASES | {"qkv_bias": "qkv_bias_", "num_local_experts": "num_experts"}

    def __post_init__(self):
        super().__post_init__()
        check_routing(self.num_experts, self.num_experts_per_tok, "num_experts")

    @property
    def qkv_bias(self) -> bool:
        return self.qkv_bias_

    @property
    def o_bias(self) -> bool:
        return False

    def sparse(self, layer: int) -> bool:
        """Whether the layer's MLP is the mixture of experts (transformers' Qwen2MoeDecoderLayer rule)."""
        step = self.decoder_sparse_step
        return layer not in self.mlp_only_layers and step > 0 and (layer + 1) % step == 0

    def layer_window(self, layer: int) -> int:
        if not (self.use_sliding_window and self.sliding_window):
            return 0
        if self.layer_types is not None:
            return self.sliding_window if self.layer_types[layer] == "sliding_attention" else 0
        # transformers' default pattern: odd-numbered layers (1-based) below max_window_layers
        sliding = (layer + 1) % 2 == 1 and layer < self.max_window_layers
        return self.sliding_window if sliding else 0


class Model(llama.Model):
    """A Qwen2-MoE causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        act = HF_ACTIVATIONS[a.hidden_act]
        attn = Attention(
            be, self.attention_shape, layer, self.inv_freq, a.layer_window(layer), self.attention_scaling
        )
        if a.sparse(layer):
            mlp = SparseMoE(
                be,
                a.hidden_size,
                a.moe_intermediate_size,
                a.num_experts,
                a.num_experts_per_tok,
                act,
                layer,
                a.norm_topk_prob,
                shared_ffn=a.shared_expert_intermediate_size,
            )
        else:
            mlp = GatedMLP(be, a.hidden_size, a.intermediate_size, act, layer)
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = stack_experts(weights, self.args.num_experts, "num_experts")
        for name in [n for n in weights if n.endswith("shared_expert_gate.weight")]:
            if len(weights[name].shape) == 1:  # (D,): older llama.cpp converters squeezed the size-1 axis
                weights[name] = host_array(weights[name]).reshape(1, -1)  # (1, D)
        return super().sanitize(weights)


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = GGUF_EXPERT_NAMES | {
    "blk.{N}.ffn_gate_inp_shexp": "model.layers.{N}.mlp.shared_expert_gate",
    "blk.{N}.ffn_gate_shexp": "model.layers.{N}.mlp.shared_expert.gate_proj",
    "blk.{N}.ffn_up_shexp": "model.layers.{N}.mlp.shared_expert.up_proj",
    "blk.{N}.ffn_down_shexp": "model.layers.{N}.mlp.shared_expert.down_proj",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps Qwen's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """expert_feed_forward_length / expert_shared_feed_forward_length are the expert and shared-expert widths;
    llama.cpp's qwen2moe graph never renormalises the k routing weights, nor does the converter say so."""
    return config | {
        "model_type": "qwen2_moe",
        "architectures": ["Qwen2MoeForCausalLM"],
        "moe_intermediate_size": int(get("expert_feed_forward_length")),
        "shared_expert_intermediate_size": int(get("expert_shared_feed_forward_length")),
        "norm_topk_prob": False,
    }
