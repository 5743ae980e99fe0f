"""GPT-OSS (gpt-oss-20b, gpt-oss-120b; HF GptOssForCausalLM, model_type gpt_oss; GGUF gpt-oss).

Pre-norm blocks: attention with q/k/v/o biases, a learnt sink logit per head in the softmax's sum, a sliding
window on the layers layer_types calls "sliding_attention" (every other one) and YaRN RoPE over neox halves;
then a mixture of num_local_experts experts (num_experts_per_tok per token) with a biased router, biased
experts and the clamped SwiGLU (blazr.models.layers.moe_oai).

Expert layouts: transformers holds gate_up_proj (E, D, 2F) with gate and up columns interleaved and down_proj
(E, F, D), both multiplied as x @ W; llama.cpp's converter writes ffn_gate_exps / ffn_up_exps (E, F, D) and
ffn_down_exps (E, D, F), each with its bias, the experts usually in MXFP4. `sanitize` turns either into the
declared (E, 2F, D) gate-then-up rows and (E, D, F).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.models import llama
from blazr.models.base import host_array
from blazr.models.decoder import PreNormBlock
from blazr.models.gpt_oss_mxfp4 import mxfp4_experts
from blazr.models.layers.attention import Attention
from blazr.models.layers.moe import check_routing, stack_experts
from blazr.models.layers.moe_oai import ClampedSwiGLUMoE


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "gpt_oss"
    intermediate_size: int = 2880  # each expert's width
    head_dim: int | None = 64
    num_local_experts: int = 128
    num_experts_per_tok: int = 4
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    attention_bias: bool = True
    sliding_window: int | None = 128

    def __post_init__(self):
        super().__post_init__()
        check_routing(self.num_local_experts, self.num_experts_per_tok, "num_local_experts")

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias

    @property
    def o_bias(self) -> bool:
        return self.attention_bias

    def layer_window(self, layer: int) -> int:
        """transformers' default: even layers (0-based) slide, odd ones attend to everything."""
        if not self.sliding_window:
            return 0
        if self.layer_types is not None:
            return self.sliding_window if self.layer_types[layer] == "sliding_attention" else 0
        return self.sliding_window if layer % 2 == 0 else 0


class Model(llama.Model):
    """A GPT-OSS causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        shape = dataclasses.replace(self.attention_shape, sinks=True)
        attn = Attention(be, shape, layer, self.inv_freq, a.layer_window(layer), self.attention_scaling)
        mlp = ClampedSwiGLUMoE(
            be,
            a.hidden_size,
            a.intermediate_size,
            a.num_local_experts,
            a.num_experts_per_tok,
            layer,
            a.swiglu_alpha,
            a.swiglu_limit,
        )
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # llama.cpp's converter names the sinks attn_sinks.weight: the checkpoint's name has no ".weight"
        weights = {
            k.removesuffix(".weight") if k.endswith("self_attn.sinks.weight") else k: v
            for k, v in weights.items()
        }
        for name in [
            n for n in weights if n.endswith("mlp.experts.gate_up_proj") and len(weights[n].shape) == 3
        ]:
            w = host_array(weights[name])  # (E, D, 2F) as x @ W, gate and up columns interleaved
            if w.shape[1] == self.args.hidden_size:
                w = w.transpose(0, 2, 1)  # (E, 2F, D)
                weights[name] = np.ascontiguousarray(np.concatenate([w[:, 0::2], w[:, 1::2]], axis=1))
                bias = host_array(weights[name + "_bias"])  # (E, 2F) interleaved
                weights[name + "_bias"] = np.ascontiguousarray(
                    np.concatenate([bias[:, 0::2], bias[:, 1::2]], axis=1)
                )
                down = name.replace("gate_up_proj", "down_proj")
                weights[down] = np.ascontiguousarray(
                    host_array(weights[down]).transpose(0, 2, 1)
                )  # (E, D, F)
        weights = _gguf_expert_biases(mxfp4_experts(weights))
        weights = stack_experts(weights, self.args.num_local_experts, "num_local_experts")
        return super().sanitize(weights)


def _gguf_expert_biases(weights: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's per-projection expert biases (E, F) gate, (E, F) up, (E, D) down -> the declared (E, 2F)
    gate-then-up and (E, D)."""
    out = dict(weights)
    for name in [n for n in weights if n.endswith("mlp.experts.gate_proj.bias")]:
        prefix = name.removesuffix("gate_proj.bias")
        gate, up = host_array(out.pop(name)), host_array(out.pop(prefix + "up_proj.bias"))
        out[prefix + "gate_up_proj_bias"] = np.concatenate([gate, up], axis=1)  # (E, 2F)
        out[prefix + "down_proj_bias"] = host_array(out.pop(prefix + "down_proj.bias"))  # (E, D)
    return out


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.attn_sinks": "model.layers.{N}.self_attn.sinks",
    "blk.{N}.post_attention_norm": "model.layers.{N}.post_attention_layernorm",
    "blk.{N}.ffn_gate_inp": "model.layers.{N}.mlp.router",
    "blk.{N}.ffn_gate_exps": "model.layers.{N}.mlp.experts.gate_proj",
    "blk.{N}.ffn_up_exps": "model.layers.{N}.mlp.experts.up_proj",
    "blk.{N}.ffn_down_exps": "model.layers.{N}.mlp.experts.down_proj",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps the q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """expert_feed_forward_length is the expert width; llama.cpp slides the window on every other layer,
    starting with the first, as transformers' default layer_types. GPT-OSS's YaRN does not round its ramp's
    ends to whole dimensions (OpenAI's code, transformers' truncate=False); the GGUF has no key for that (and
    llama.cpp rounds them), so it is set here: the model's own rope, not llama.cpp's approximation."""
    out = config | {
        "model_type": "gpt_oss",
        "architectures": ["GptOssForCausalLM"],
        "intermediate_size": int(get("expert_feed_forward_length")),
        "attention_bias": True,
    }
    if out.get("rope_scaling"):
        out["rope_scaling"] = out["rope_scaling"] | {"truncate": False}
    return out
