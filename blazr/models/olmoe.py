"""OLMoE sparse mixture-of-experts decoders (HF OlmoeForCausalLM, model_type olmoe; GGUF olmoe).

OLMo 2's attention (an RMSNorm over the whole q and k projections before RoPE) in Llama's pre-norm blocks
(input_layernorm / post_attention_layernorm, not OLMo 2's post-norms); the MLP is a SparseMoE of num_experts
experts of intermediate_size, num_experts_per_tok per token, renormalised only with norm_topk_prob.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models import llama, olmo2
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.moe import GGUF_EXPERT_NAMES, SparseMoE, check_routing, stack_experts


@dataclass
class ModelArgs(olmo2.ModelArgs):
    model_type: str = "olmoe"
    intermediate_size: int = 1024  # of each expert
    num_experts: int = 64
    num_experts_per_tok: int = 8
    norm_topk_prob: bool = False
    clip_qkv: float | None = None

    ALIASES = olmo2.ModelArgs.ALIASES | {"num_local_experts": "num_experts"}  # transformers' attribute_map

    def __post_init__(self):
        super().__post_init__()
        check_routing(self.num_experts, self.num_experts_per_tok, "num_experts")
        if self.clip_qkv is not None:  # a clamp of q, k and v no released OLMoE uses; not built here
            raise UnsupportedError(f"olmoe clip_qkv {self.clip_qkv} is not supported")


class Model(llama.Model):
    """An OLMoE causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        moe = SparseMoE(
            be,
            a.hidden_size,
            a.intermediate_size,
            a.num_experts,
            a.num_experts_per_tok,
            HF_ACTIVATIONS[a.hidden_act],
            layer,
            a.norm_topk_prob,
        )
        return PreNormBlock(layer, attn, moe, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        return super().sanitize(stack_experts(weights, self.args.num_experts, "num_experts"))


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = GGUF_EXPERT_NAMES | {
    "blk.{N}.attn_q_norm": "model.layers.{N}.self_attn.q_norm",
    "blk.{N}.attn_k_norm": "model.layers.{N}.self_attn.k_norm",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps OLMoE's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's olmoe graph never renormalises the k routing weights, nor does the converter say so."""
    return config | {
        "model_type": "olmoe",
        "architectures": ["OlmoeForCausalLM"],
        "norm_topk_prob": False,
    }
