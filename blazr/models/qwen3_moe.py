"""Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B) decoders (HF Qwen3MoeForCausalLM, model_type qwen3_moe; GGUF
qwen3moe).

Qwen3's attention (no q/k/v biases, an RMSNorm over each query and key head before RoPE) in Qwen2-MoE's blocks:
the MLP of every decoder_sparse_step-th layer (not in mlp_only_layers) is a SparseMoE of num_experts experts of
moe_intermediate_size, num_experts_per_tok per token (renormalised with norm_topk_prob, true in the released
models); the other layers have a dense MLP of intermediate_size. Unlike Qwen2-MoE there is no shared expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.models import qwen2_moe
from blazr.models.layers.moe import GGUF_EXPERT_NAMES


@dataclass
class ModelArgs(qwen2_moe.ModelArgs):
    model_type: str = "qwen3_moe"
    intermediate_size: int = 6144  # of the dense MLP layers (mlp_only_layers)
    num_experts: int = 128
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 768
    shared_expert_intermediate_size: int = 0  # none: SparseMoE builds no shared expert

    def __post_init__(self):
        super().__post_init__()
        self.mlp_only_layers = self.mlp_only_layers or []  # Qwen3MoeConfig's default is None, read as []

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias  # transformers' Qwen3MoeAttention: bias=attention_bias on q, k, v and o

    @property
    def o_bias(self) -> bool:
        return self.attention_bias

    @property
    def qk_norm_eps(self) -> float | None:
        return self.rms_norm_eps  # one RMSNorm of head_dim over every query and key head

    def layer_window(self, layer: int) -> int:
        """Qwen3MoeConfig keeps sliding_window only with use_sliding_window, and then every layer uses it."""
        return self.sliding_window if self.use_sliding_window and self.sliding_window else 0


class Model(qwen2_moe.Model):
    """A Qwen3-MoE causal LM on one backend: `model(batch, cache)` -> logits (R, V). Qwen2-MoE's model: the
    args above give it qk-norm, no biases and no shared expert."""


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = GGUF_EXPERT_NAMES | {
    "blk.{N}.attn_q_norm": "model.layers.{N}.self_attn.q_norm",
    "blk.{N}.attn_k_norm": "model.layers.{N}.self_attn.k_norm",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps Qwen's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """expert_feed_forward_length is the expert width. llama.cpp's qwen3moe graph renormalises the k routing
    weights always and makes every layer a mixture of experts, whatever the converted config said."""
    return config | {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "moe_intermediate_size": int(get("expert_feed_forward_length")),
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
