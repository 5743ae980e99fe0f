"""DeepSeek-V2 and V2-Lite (HF DeepseekV2ForCausalLM, model_type deepseek_v2; GGUF deepseek2) and DeepSeek-V3
(DeepseekV3ForCausalLM, deepseek_v3).

Pre-norm blocks of multi-head latent attention (blazr.models.layers.mla: the KV cache holds one latent of
kv_lora_rank + qk_rope_head_dim values per token and layer) and, after the first first_k_dense_replace layers,
a mixture of n_routed_experts experts (num_experts_per_tok per token) plus n_shared_experts always-on experts
fused into one MLP. V2 routes on softmax scores (greedy, or group-limited to the topk_group best of n_group
groups), V3 on sigmoid scores with a learnt selection bias ("noaux_tc"); the weights times
routed_scaling_factor. RoPE is interleaved, over the rotary part only, with DeepSeek's YaRN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, ConfigError
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs, host_array
from blazr.models.decoder import DecoderLM, KVCache, PreNormBlock
from blazr.models.layers.mla import LatentAttention, LatentShape, latent_scale
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.moe import GGUF_EXPERT_NAMES, SparseMoE, check_routing, stack_experts
from blazr.models.layers.norm import RMSNorm
from blazr.models.layers.rope import device_rope, theta_and_scaling
from blazr.models.layers.router import Routing


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "deepseek_v2"
    hidden_size: int = 4096
    intermediate_size: int = 11008  # of the dense layers
    num_hidden_layers: int = 30
    num_attention_heads: int = 32
    kv_lora_rank: int | None = 512
    q_lora_rank: int | None = 1536
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    vocab_size: int = 102400
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    hidden_act: str = "silu"
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    n_routed_experts: int | None = 64
    n_shared_experts: int | None = 2
    num_experts_per_tok: int | None = 6
    moe_intermediate_size: int = 1407
    topk_method: str = "greedy"
    n_group: int | None = 1
    topk_group: int | None = 1
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = False
    scoring_func: str = "softmax"
    rope_interleave: bool = True  # V3's option: False rotates the rotary part in halves (neox) instead

    ALIASES = {"num_experts": "n_routed_experts", "num_local_experts": "n_routed_experts"}

    def __post_init__(self):
        if not self.kv_lora_rank:
            raise ConfigError("a multi-head latent attention config needs kv_lora_rank (DeepSeek-V2's key)")
        if self.attention_bias:
            raise ConfigError("attention_bias: DeepSeek latent attention with biases is not supported")
        self.rope_theta, self.rope_scaling = theta_and_scaling(
            self.rope_theta, self.rope_scaling, self.rope_parameters
        )
        if self.n_routed_experts:
            check_routing(self.n_routed_experts, self.num_experts_per_tok or 0, "n_routed_experts")
        self.routing.check(self.n_routed_experts or 1, self.num_experts_per_tok or 1)

    @property
    def num_key_value_heads(self) -> int:
        return 1  # one latent "head" in the cache, shared by every query head

    @property
    def head_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim  # values a token takes in one layer's cache

    @property
    def routing(self) -> Routing:
        # V3 (transformers' class) always routes on biased sigmoid scores; its released config.json says so too
        v3 = self.model_type == "deepseek_v3" or self.scoring_func == "sigmoid"
        method = "noaux_tc" if v3 else self.topk_method
        return Routing(method, self.n_group or 1, self.topk_group or 1, self.routed_scaling_factor)

    def sparse(self, layer: int) -> bool:
        return (
            bool(self.n_routed_experts)
            and layer >= self.first_k_dense_replace
            and layer % self.moe_layer_freq == 0
        )


class Model(DecoderLM):
    """A DeepSeek-V2/V3 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        a = args
        self.inv_freq, rope_factor = device_rope(
            backend, a.qk_rope_head_dim, a.rope_theta, a.rope_scaling, a.max_position_embeddings
        )  # (p/2,) f32
        scaling = a.rope_scaling or {}
        self.scale = latent_scale(
            a.qk_nope_head_dim,
            a.qk_rope_head_dim,
            scaling.get("mscale_all_dim") or 0,
            scaling.get("factor", 1.0),
        )
        self.rope_gain = (
            rope_factor**2
        )  # transformers scales cos and sin by it: q_pe . k_pe grows by its square
        self.latent_shape = LatentShape(
            a.hidden_size,
            a.num_attention_heads,
            a.q_lora_rank,
            a.kv_lora_rank,
            a.qk_nope_head_dim,
            a.qk_rope_head_dim,
            a.v_head_dim,
            a.rms_norm_eps,
            "interleaved" if a.rope_interleave else "neox",
        )
        super().__init__(args, backend, dtype)

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(self.be, dim, self.args.rms_norm_eps)

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        act = HF_ACTIVATIONS[a.hidden_act]
        attn = LatentAttention(be, self.latent_shape, layer, self.inv_freq, self.scale, self.rope_gain)
        if a.sparse(layer):
            mlp = SparseMoE(
                be,
                a.hidden_size,
                a.moe_intermediate_size,
                a.n_routed_experts,
                a.num_experts_per_tok,
                act,
                layer,
                a.norm_topk_prob,
                shared_ffn=a.moe_intermediate_size * (a.n_shared_experts or 0),
                routing=a.routing,
                shared_name="shared_experts.",
                shared_gated=False,
                score_bias=a.routing.method == "noaux_tc",
            )
        else:
            mlp = GatedMLP(be, a.hidden_size, a.intermediate_size, act, layer)
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))

    KV_DTYPE_CHOICE = False  # the latent cache keeps the model's dtype (blazr.engine.kv_dtype)

    def make_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """Per layer one (num_blocks * block_size, 1, r + p) latent array, serving as keys and values: the
        pair holds it twice (the engine copies and counts each distinct array once)."""
        shape = (num_blocks * block_size, 1, self.latent_shape.latent)
        caches = [self.be.empty(shape, self.dtype) for _ in self.layers]
        return [(c, c) for c in caches]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # llama.cpp names the selection bias exp_probs_b.bias: the checkpoint's name has no ".bias"
        weights = {
            k.removesuffix(".bias") if k.endswith("e_score_correction_bias.bias") else k: v
            for k, v in weights.items()
        }
        weights = join_kv_b(weights, self.latent_shape)
        if self.args.n_routed_experts:
            weights = stack_experts(weights, self.args.n_routed_experts, "n_routed_experts")
        return super().sanitize(weights)


def join_kv_b(weights: dict[str, Any], s: LatentShape) -> dict[str, Any]:
    """llama.cpp's converter splits kv_b_proj into attn_k_b (H, r, nope) (transposed) and attn_v_b (H, v, r):
    joined back into kv_b_proj (H (nope + v), r), which the attention layer splits its own way."""
    out = dict(weights)
    for name in [n for n in weights if n.endswith("self_attn.k_b_proj.weight")]:
        prefix = name.removesuffix("k_b_proj.weight")
        v_name = prefix + "v_b_proj.weight"
        if v_name not in weights:
            raise CheckpointError(f"the checkpoint has {name!r} but no {v_name!r}")
        k_b = host_array(out.pop(name)).astype(np.float32).reshape(s.heads, s.kv_lora_rank, s.nope_dim)
        v_b = host_array(out.pop(v_name)).astype(np.float32).reshape(s.heads, s.v_dim, s.kv_lora_rank)
        joined = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1)  # (H, nope + v, r)
        out[prefix + "kv_b_proj.weight"] = joined.reshape(-1, s.kv_lora_rank)  # (H (nope + v), r)
    return out


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = GGUF_EXPERT_NAMES | {
    "blk.{N}.attn_q_a": "model.layers.{N}.self_attn.q_a_proj",
    "blk.{N}.attn_q_a_norm": "model.layers.{N}.self_attn.q_a_layernorm",
    "blk.{N}.attn_q_b": "model.layers.{N}.self_attn.q_b_proj",
    "blk.{N}.attn_kv_a_mqa": "model.layers.{N}.self_attn.kv_a_proj_with_mqa",
    "blk.{N}.attn_kv_a_norm": "model.layers.{N}.self_attn.kv_a_layernorm",
    "blk.{N}.attn_kv_b": "model.layers.{N}.self_attn.kv_b_proj",
    "blk.{N}.attn_k_b": "model.layers.{N}.self_attn.k_b_proj",
    "blk.{N}.attn_v_b": "model.layers.{N}.self_attn.v_b_proj",
    "blk.{N}.ffn_gate_shexp": "model.layers.{N}.mlp.shared_experts.gate_proj",
    "blk.{N}.ffn_up_shexp": "model.layers.{N}.mlp.shared_experts.up_proj",
    "blk.{N}.ffn_down_shexp": "model.layers.{N}.mlp.shared_experts.down_proj",
    "blk.{N}.exp_probs_b": "model.layers.{N}.mlp.gate.e_score_correction_bias",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps DeepSeek's rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp writes the latent sizes as key_length = r + p, value_length = r and the expanded head sizes
    as key_length_mla / value_length_mla; the rotary part is rope.dimension_count."""
    rope = int(get("rope.dimension_count"))
    kv_lora = int(get("attention.kv_lora_rank"))
    q_lora = get("attention.q_lora_rank", None)
    gating = int(get("expert_gating_func", 1))  # llama.cpp: 1 softmax, 2 sigmoid
    out = config | {
        "model_type": "deepseek_v3" if gating == 2 else "deepseek_v2",
        "architectures": ["DeepseekV3ForCausalLM" if gating == 2 else "DeepseekV2ForCausalLM"],
        "kv_lora_rank": kv_lora,
        "q_lora_rank": int(q_lora) if q_lora else None,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": int(get("attention.key_length_mla")) - rope,
        "v_head_dim": int(get("attention.value_length_mla")),
        "first_k_dense_replace": int(get("leading_dense_block_count", 0)),
        "moe_intermediate_size": int(get("expert_feed_forward_length", 0)),
        "n_shared_experts": int(get("expert_shared_count", 0)),
        "routed_scaling_factor": float(get("expert_weights_scale", 1.0)),
        "norm_topk_prob": bool(get("expert_weights_norm", False)),
        "n_group": int(get("expert_group_count", 1)),
        "topk_group": int(get("expert_group_used_count", 1)),
    }
    if out["n_group"] > 1 and gating != 2:
        out["topk_method"] = "group_limited_greedy"
    log_mul = get("rope.scaling.yarn_log_multiplier", None)
    if log_mul and out.get("rope_scaling"):
        # the converter writes 0.1 mscale_all_dim; every released DeepSeek config has mscale == mscale_all_dim
        mscale = float(log_mul) / 0.1
        out["rope_scaling"] = out["rope_scaling"] | {"mscale": mscale, "mscale_all_dim": mscale}
    return out
