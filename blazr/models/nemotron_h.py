"""NVIDIA Nemotron-H (HF NemotronHForCausalLM, model_type nemotron_h; GGUF nemotron_h, nemotron_h_moe): a stack of
one-part layers, each x + mixer(RMSNorm(x)) with the mixer a Mamba2 layer, attention, a squared-ReLU MLP or a
mixture of experts.

hybrid_override_pattern spells the stack one character a layer ("M" Mamba2, "*" attention, "-" MLP, "E" Nemotron
3's mixture of ungated relu2 experts, blazr.models.layers.moe_ungated); transformers 5 writes it as
layers_block_type. Attention has no positions (NoPE). The Mamba2 mixers clamp dt below at time_step_min. The
cache holds a paged (k, v) pair for attention layers, an SSMStateCache for Mamba layers and nothing for MLP and
mixture layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blazr.errors import ConfigError
from blazr.models.base import Array, BaseModelArgs, Step, trace
from blazr.models.batch import ForwardBatch
from blazr.models.cache import SSMStateCache
from blazr.models.decoder import DecoderLM
from blazr.models.hybrid import GGUF_MAMBA_NAMES
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module
from blazr.models.layers.moe import check_routing
from blazr.models.layers.moe_ungated import UngatedMoE, stack_ungated_experts
from blazr.models.layers.norm import RMSNorm
from blazr.models.layers.router import Routing
from blazr.models.layers.ssm import Mamba2Mixer, SSMShape, check_ssm_tensors
from blazr.models.mamba2 import from_gguf_layout, with_state_slots

# hybrid_override_pattern's characters and transformers 5's words -> the kind of each layer
KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
WORDS = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "attention",
    "full_attention": "attention",
}
WORDS |= {"mlp": "mlp", "moe": "moe"}


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "nemotron_h"
    hidden_size: int = 4096
    vocab_size: int = 131072
    num_hidden_layers: int | None = None  # (optional) the pattern's length
    hybrid_override_pattern: str | None = None
    layers_block_type: list[str] | None = None
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    attention_bias: bool = False
    intermediate_size: int = 21504
    mlp_hidden_act: str = "relu2"
    mlp_bias: bool = False
    ssm_state_size: int = 128
    mamba_num_heads: int = 128
    mamba_head_dim: int = 64
    n_groups: int = 8
    conv_kernel: int = 4
    use_conv_bias: bool = True
    use_bias: bool = False  # of the Mamba layers' in_proj and out_proj
    mamba_hidden_act: str = "silu"
    time_step_min: float = 0.001
    layer_norm_epsilon: float = 1e-5
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    # the "E" layers (Nemotron 3)
    n_routed_experts: int = 8
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 7688
    moe_shared_expert_intermediate_size: int = 7688
    moe_latent_size: int | None = None
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True

    ALIASES = {
        "layer_types": "layers_block_type",
        "rms_norm_eps": "layer_norm_epsilon",
        "num_local_experts": "n_routed_experts",
    }

    def __post_init__(self):
        if self.layers_block_type is not None:
            unknown = [w for w in self.layers_block_type if w not in WORDS]
            if unknown:
                raise ConfigError(f"layers_block_type has {unknown[0]!r}; known: {', '.join(WORDS)}")
            self.kinds = [WORDS[w] for w in self.layers_block_type]
        elif self.hybrid_override_pattern:
            unknown = [c for c in self.hybrid_override_pattern if c not in KINDS]
            if unknown:
                raise ConfigError(f"hybrid_override_pattern has {unknown[0]!r}; known: {''.join(KINDS)}")
            self.kinds = [KINDS[c] for c in self.hybrid_override_pattern]
        else:
            raise ConfigError("a Nemotron-H config needs hybrid_override_pattern or layers_block_type")
        if "moe" in self.kinds:
            check_routing(self.n_routed_experts, self.num_experts_per_tok, "n_routed_experts")
            self.routing.check(self.n_routed_experts, self.num_experts_per_tok)
        self.num_hidden_layers = len(self.kinds)
        if self.mlp_hidden_act != "relu2" or self.mamba_hidden_act != "silu":
            raise ConfigError(
                f"mlp_hidden_act {self.mlp_hidden_act!r} / mamba_hidden_act {self.mamba_hidden_act!r}: Nemotron-H "
                "runs relu2 and silu"
            )
        if self.n_groups < 1 or self.mamba_num_heads % self.n_groups:
            raise ConfigError(f"n_groups={self.n_groups} must divide mamba_num_heads={self.mamba_num_heads}")

    @property
    def routing(self) -> Routing:
        """DeepSeek-V3's router (transformers' NemotronHTopkRouter): biased sigmoid scores, group-limited."""
        return Routing("noaux_tc", self.n_group or 1, self.topk_group or 1, float(self.routed_scaling_factor))

    @property
    def ssm_shape(self) -> SSMShape:
        return SSMShape(
            self.hidden_size,
            self.mamba_num_heads,
            self.mamba_head_dim,
            self.n_groups,
            self.ssm_state_size,
            self.conv_kernel,
            self.layer_norm_epsilon,
            self.use_bias,
            self.use_conv_bias,
            (self.time_step_min, math.inf),
        )


class NemotronBlock(Module):
    """x + mixer(norm(x)) for any of the four mixers (HF NemotronHBlock)."""

    OPS = ("binary",)

    def __init__(self, layer: int, kind: str, mixer: Module, norm: RMSNorm):
        self.layer, self.kind, self.mixer, self.norm = layer, kind, mixer, norm

    def children(self) -> dict[str, Module]:
        return {"norm.": self.norm, "mixer.": self.mixer}

    def __call__(self, x: Array, step: Step, first: Array, second: Array) -> Array:
        h = self.norm(x)  # (T, D)
        trace("attn_norm", self.layer, h)
        h = self.mixer(h) if self.kind in ("mlp", "moe") else self.mixer(h, step, first, second)  # (T, D)
        x = self.mixer.be.binary("add", x, h)  # (T, D)
        trace("l_out", self.layer, x)
        return x


class Model(DecoderLM):
    """A Nemotron-H causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    EMBED, LAYERS, NORM, HEAD = "backbone.embeddings.", "backbone.layers.{}.", "backbone.norm_f.", "lm_head."
    MIXER = "backbone.layers.{}.mixer."
    stateful = True  # blazr.models.cache: state slots, no prefix cache

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(self.be, dim, self.args.layer_norm_epsilon)

    def make_block(self, layer: int) -> NemotronBlock:
        a, be = self.args, self.be
        kind = a.kinds[layer]
        if kind == "mamba":
            mixer: Module = Mamba2Mixer(be, a.ssm_shape, layer)
        elif kind == "attention":
            shape = AttentionShape(
                a.hidden_size,
                a.num_attention_heads,
                a.num_key_value_heads,
                a.head_dim,
                a.attention_bias,
                a.attention_bias,
            )
            mixer = Attention(be, shape, layer, None)  # no RoPE: NoPE
        elif kind == "moe":
            mixer = UngatedMoE(
                be,
                a.hidden_size,
                a.moe_intermediate_size,
                a.n_routed_experts,
                a.num_experts_per_tok,
                layer,
                a.norm_topk_prob,
                a.routing,
                shared_ffn=a.moe_shared_expert_intermediate_size,
                latent=a.moe_latent_size,
                bias=a.mlp_bias,
            )
        else:
            mixer = MLP(be, a.hidden_size, a.intermediate_size, "relu2", layer, a.mlp_bias)
        return NemotronBlock(layer, kind, mixer, self.make_norm(a.hidden_size))

    def make_cache(self, num_blocks: int, block_size: int, num_seqs: int = 1) -> list:
        """Per attention layer (k, v), each (num_blocks * block_size, Hkv, Dh); per Mamba layer an SSMStateCache
        of num_seqs slots; per MLP or mixture layer nothing (None, None)."""
        a, shape = self.args, (num_blocks * block_size, self.args.num_key_value_heads, self.args.head_dim)
        cache: list = []
        for kind, layer in zip(a.kinds, self.layers, strict=True):
            if kind == "attention":
                dtype = self.kv_dtype or self.dtype  # blazr.engine.kv_dtype
                cache.append((self.be.empty(shape, dtype), self.be.empty(shape, dtype)))
            elif kind == "mamba":
                cache.append(SSMStateCache(*layer.mixer.make_state(num_seqs)))
            else:
                cache.append((None, None))
        return cache

    def __call__(self, batch: ForwardBatch, cache: list) -> Array:
        return super().__call__(with_state_slots(batch), cache)

    def hidden(self, batch: ForwardBatch, cache: list) -> Array:
        return super().hidden(with_state_slots(batch), cache)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # the released checkpoints say backbone.; transformers 5 saves them as model.
        weights = {("backbone." + k[6:] if k.startswith("model.") else k): v for k, v in weights.items()}
        # llama.cpp names the selection bias exp_probs_b.bias: the checkpoint's name has no ".bias"
        weights = {
            k.removesuffix(".bias") if k.endswith("_correction_bias.bias") else k: v
            for k, v in weights.items()
        }
        weights = from_gguf_layout(weights, self.args.num_hidden_layers, self.MIXER)
        for i, kind in enumerate(self.args.kinds):
            if kind == "mamba":
                check_ssm_tensors(weights, self.MIXER.format(i), self.args.ssm_shape)
        if "moe" in self.args.kinds:
            weights = stack_ungated_experts(weights, self.args.n_routed_experts, "n_routed_experts")
        return super().sanitize(weights)


# ---- GGUF ---------------------------------------------------------------------------------------------------

_MIXER = "backbone.layers.{N}.mixer."
GGUF_TENSOR_NAMES = {k: v.replace("model.layers.{N}.mamba.", _MIXER) for k, v in GGUF_MAMBA_NAMES.items()} | {
    "token_embd": "backbone.embeddings",
    "output_norm": "backbone.norm_f",
    "blk.{N}.attn_norm": "backbone.layers.{N}.norm",
    "blk.{N}.attn_q": _MIXER + "q_proj",
    "blk.{N}.attn_k": _MIXER + "k_proj",
    "blk.{N}.attn_v": _MIXER + "v_proj",
    "blk.{N}.attn_output": _MIXER + "o_proj",
    "blk.{N}.ffn_up": _MIXER + "up_proj",
    "blk.{N}.ffn_down": _MIXER + "down_proj",
    # nemotron_h_moe's mixtures
    "blk.{N}.ffn_gate_inp": _MIXER + "gate",
    "blk.{N}.exp_probs_b": _MIXER + "gate.e_score_correction_bias",
    "blk.{N}.ffn_latent_down": _MIXER + "fc1_latent_proj",
    "blk.{N}.ffn_latent_up": _MIXER + "fc2_latent_proj",
    "blk.{N}.ffn_up_exps": _MIXER + "experts.up_proj",
    "blk.{N}.ffn_down_exps": _MIXER + "experts.down_proj",
    "blk.{N}.ffn_up_shexp": _MIXER + "shared_experts.up_proj",
    "blk.{N}.ffn_down_shexp": _MIXER + "shared_experts.down_proj",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()


GGUF_CONFIG_READS_TENSORS = True  # which layers attend or are MLPs: read from the tensors each layer has


def _kind(i: int, shapes: dict[str, tuple[int, ...]]) -> str:
    if f"blk.{i}.attn_q.weight" in shapes:
        return "*"
    if f"blk.{i}.ffn_gate_inp.weight" in shapes:
        return "E"
    return "-" if f"blk.{i}.ffn_up.weight" in shapes else "M"


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's nemotron_h and nemotron_h_moe: a layer with attn_q attends, one with ffn_gate_inp is a
    mixture, one with ffn_up an MLP, the others are Mamba2 (the per-layer head_count_kv and feed_forward_length
    say the same in files made under transformers 4, not in those made under 5); the Mamba sizes as for mamba2,
    the mixtures' from the expert_* keys."""
    n = config["num_hidden_layers"]
    pattern = "".join(_kind(i, shapes) for i in range(n))
    ffn = [shapes[f"blk.{i}.ffn_up.weight"][0] for i in range(n) if pattern[i] == "-"]
    kv = get("attention.head_count_kv")
    inner, heads = int(get("ssm.inner_size")), int(get("ssm.time_step_rank"))
    return (
        config
        | {
            "model_type": "nemotron_h",
            "architectures": ["NemotronHForCausalLM"],
            "hybrid_override_pattern": pattern,
            "intermediate_size": ffn[0] if ffn else 0,
            "num_key_value_heads": int(max(kv)) if isinstance(kv, list) else int(kv),
            "head_dim": int(get("attention.key_length")),
            "mamba_num_heads": heads,
            "mamba_head_dim": inner // heads,
            "ssm_state_size": int(get("ssm.state_size")),
            "n_groups": int(get("ssm.group_count", 1)),
            "conv_kernel": int(get("ssm.conv_kernel")),
            "layer_norm_epsilon": config["rms_norm_eps"],
        }
        | (_moe_config(get) if "E" in pattern else {})
    )


def _moe_config(get) -> dict[str, Any]:
    latent = get("moe_latent_size", None)
    return {
        "moe_intermediate_size": int(get("expert_feed_forward_length")),
        "moe_shared_expert_intermediate_size": int(get("expert_shared_feed_forward_length", 0)),
        "n_shared_experts": int(get("expert_shared_count", 1)),
        "moe_latent_size": int(latent) if latent else None,
        "routed_scaling_factor": float(get("expert_weights_scale", 1.0)),
        "norm_topk_prob": bool(get("expert_weights_norm", False)),
        "n_group": int(get("expert_group_count", 1)),
        "topk_group": int(get("expert_group_used_count", 1)),
    }
