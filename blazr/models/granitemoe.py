"""IBM Granite 3.x mixture-of-experts decoders (HF GraniteMoeForCausalLM, model_type granitemoe; GGUF
granitemoe).

Granite's four multipliers (embedding, residual, attention, logits) on Llama's attention and pre-norm blocks;
the MLP is a SparseMoE of num_local_experts SwiGLU experts of intermediate_size, num_experts_per_tok per token.
transformers' router takes the top k router logits, then a softmax over those k: the same experts and weights
as a softmax over all E, its top k, renormalised (exp(l_i) / sum_k exp(l_j) either way), so SparseMoE runs it
with norm_topk_prob, as llama.cpp's granite graph does.

Checkpoints keep each layer's experts fused: `block_sparse_moe.input_linear.weight` (E, 2F, D) gate rows then
up rows, `block_sparse_moe.output_linear.weight` (E, D, F), and the router `block_sparse_moe.router.layer.weight`
(E, D); transformers 5 renames them experts.gate_up_proj, experts.down_proj and router.weight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from blazr.models import granite
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.moe import GGUF_EXPERT_NAMES, SparseMoE, check_count, check_routing, stack_experts

# checkpoint (and transformers 5) names under block_sparse_moe -> the SparseMoE names under mlp
_RENAMES = (
    (re.compile(r"\.block_sparse_moe\.input_linear\.weight$"), ".mlp.experts.gate_up_proj"),
    (re.compile(r"\.block_sparse_moe\.output_linear\.weight$"), ".mlp.experts.down_proj"),
    (re.compile(r"\.block_sparse_moe\.router(\.layer)?\.weight$"), ".mlp.gate.weight"),
    (re.compile(r"\.block_sparse_moe\."), ".mlp."),
)


@dataclass
class ModelArgs(granite.ModelArgs):
    model_type: str = "granitemoe"
    intermediate_size: int = 1024  # of each expert
    num_local_experts: int = 8
    num_experts_per_tok: int = 2

    def __post_init__(self):
        super().__post_init__()
        check_routing(self.num_local_experts, self.num_experts_per_tok, "num_local_experts")

    def layer_window(self, layer: int) -> int:
        return 0  # GraniteMoe attends to the whole context


class Model(granite.Model):
    """A Granite-MoE causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        moe = SparseMoE(
            be,
            a.hidden_size,
            a.intermediate_size,
            a.num_local_experts,
            a.num_experts_per_tok,
            HF_ACTIVATIONS[a.hidden_act],
            layer,
            norm_topk_prob=True,  # softmax over the top-k logits == renormalised top-k of the full softmax
        )
        norms = self.make_norm(a.hidden_size), self.make_norm(a.hidden_size)
        return PreNormBlock(layer, attn, moe, *norms, residual_scale=self.residual_scale)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        return super().sanitize(rename_experts(weights, self.args.num_local_experts))


def rename_experts(weights: dict[str, Any], experts: int) -> dict[str, Any]:
    """block_sparse_moe's fused experts and router as SparseMoE's stacked names under `mlp.` (an expert count
    other than num_local_experts names the checkpoint's own tensor)."""
    renamed = {}
    for name, tensor in weights.items():
        for i, (pattern, new) in enumerate(_RENAMES):
            if pattern.search(name):
                if i < 3:  # experts or router: a count mismatch names the checkpoint's own tensor
                    check_count(name, tensor, tensor.shape[0], experts, "num_local_experts")
                name = pattern.sub(new, name)
                break
        renamed[name] = tensor
    return stack_experts(renamed, experts, "num_local_experts")


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = GGUF_EXPERT_NAMES  # the converter splits input_linear into ffn_gate_exps / ffn_up_exps
GGUF_QK_PERMUTED = frozenset({"granitemoe"})  # the converter is LlamaModel's, which interleaves q/k rows


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """Granite's multiplier keys (granite.gguf_config); feed_forward_length is the expert width."""
    return granite.gguf_config(arch, get, config) | {
        "model_type": "granitemoe",
        "architectures": ["GraniteMoeForCausalLM"],
    }
