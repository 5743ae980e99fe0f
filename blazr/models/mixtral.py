"""Mixtral sparse mixture-of-experts decoders (HF MixtralForCausalLM, model_type mixtral; GGUF "llama" with an
expert count, as llama.cpp's converter writes them).

Mistral's attention (sliding window when the config sets one) and pre-norm blocks; the MLP is a SparseMoE of
num_local_experts SwiGLU experts, num_experts_per_tok per token, weights renormalised over the chosen k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.moe import SparseMoE, check_routing, stack_experts


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "mixtral"
    intermediate_size: int = 14336  # of each expert
    num_local_experts: int = 8
    num_experts_per_tok: int = 2

    def __post_init__(self):
        super().__post_init__()
        check_routing(self.num_local_experts, self.num_experts_per_tok, "num_local_experts")


class Model(llama.Model):
    """A Mixtral causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        attn = Attention(
            be, self.attention_shape, layer, self.inv_freq, a.layer_window(layer), self.attention_scaling
        )
        moe = SparseMoE(
            be,
            a.hidden_size,
            a.intermediate_size,
            a.num_local_experts,
            a.num_experts_per_tok,
            HF_ACTIVATIONS[a.hidden_act],
            layer,
            norm_topk_prob=True,  # Mixtral always renormalises the k routing weights
        )
        return PreNormBlock(layer, attn, moe, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # checkpoints name the MoE "block_sparse_moe" and its experts w1 (gate), w3 (up), w2 (down);
        # transformers 5 renames the first to "mlp" at load, as here
        weights = {k.replace(".block_sparse_moe.", ".mlp."): v for k, v in weights.items()}
        weights = stack_experts(weights, self.args.num_local_experts, "num_local_experts", ("w1", "w3", "w2"))
        return super().sanitize(weights)
