"""AI21 Jamba (HF JambaForCausalLM, model_type jamba; GGUF jamba): Mamba (1) layers with attention every
attn_layer_period layers (from attn_layer_offset), and a mixture of experts in place of the MLP every
expert_layer_period layers (from expert_layer_offset).

Each layer is x + mixer(input_layernorm(x)), then x + FFN(pre_ff_layernorm(x)). The Mamba mixer
(blazr.models.layers.mamba1) RMS-normalises dt, B and C with weights; attention has no positions; the router
takes the top k of a softmax without renormalising them. The cache is a hybrid's (blazr.models.hybrid).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from blazr.errors import CheckpointError, ConfigError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.hybrid import MAMBA_PREFIX, HybridLM
from blazr.models.layers.attention import Attention
from blazr.models.layers.mamba1 import MambaMixer, MambaShape
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.moe import GGUF_EXPERT_NAMES, SparseMoE, check_routing, stack_experts
from blazr.models.layers.ssm import check_conv_weight
from blazr.models.mamba2 import from_gguf_layout

NAMES = ("input_layernorm.", "self_attn.", "pre_ff_layernorm.", "feed_forward.")
_ROUTER = re.compile(r"\.feed_forward\.router\.weight$")
_FIRST_EXPERT = re.compile(r"^(model\.layers\.(\d+)\.feed_forward\.)experts\.0\.")


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "jamba"
    max_position_embeddings: int = 262144
    num_experts: int = 16
    num_experts_per_tok: int = 2
    expert_layer_period: int = 2
    expert_layer_offset: int = 1
    attn_layer_period: int = 8
    attn_layer_offset: int = 4
    mamba_d_state: int = 16
    mamba_d_conv: int = 4
    mamba_expand: int = 2
    mamba_dt_rank: int | str = "auto"
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.mamba_dt_rank == "auto":
            self.mamba_dt_rank = math.ceil(self.hidden_size / 16)
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act {self.hidden_act!r}: Jamba's Mamba layers run SiLU only")
        for key in ("attn_layer_period", "expert_layer_period"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}={getattr(self, key)} must be at least 1")
        if any(self.is_moe(i) for i in range(self.num_hidden_layers)):
            check_routing(self.num_experts, self.num_experts_per_tok, "num_experts")

    def is_attention(self, layer: int) -> bool:
        return layer % self.attn_layer_period == self.attn_layer_offset

    def is_moe(self, layer: int) -> bool:
        return layer % self.expert_layer_period == self.expert_layer_offset and self.num_experts > 1

    def layer_window(self, layer: int) -> int:
        return 0

    @property
    def mamba_shape(self) -> MambaShape:
        return MambaShape(
            self.hidden_size,
            self.mamba_expand * self.hidden_size,
            self.mamba_d_state,
            self.mamba_d_conv,
            int(self.mamba_dt_rank),
            self.mamba_proj_bias,
            self.mamba_conv_bias,
            self.rms_norm_eps,
            dt_bc_weights=True,
        )


class Model(HybridLM, llama.Model):
    """A Jamba causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    NORM = "model.final_layernorm."

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        act = HF_ACTIVATIONS[a.hidden_act]
        if a.is_moe(layer):
            ffn = SparseMoE(
                be,
                a.hidden_size,
                a.intermediate_size,
                a.num_experts,
                a.num_experts_per_tok,
                act,
                layer,
                False,
            )
        else:
            ffn = GatedMLP(be, a.hidden_size, a.intermediate_size, act, layer, a.mlp_bias)
        norms = self.make_norm(a.hidden_size), self.make_norm(a.hidden_size)
        if a.is_attention(layer):
            mixer = Attention(be, self.attention_shape, layer, None)  # no positions
            return PreNormBlock(layer, mixer, ffn, *norms, names=NAMES)
        mixer = MambaMixer(be, a.mamba_shape, layer)
        return PreNormBlock(layer, mixer, ffn, *norms, names=("input_layernorm.", "mamba.", *NAMES[2:]))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        a = self.args
        out: dict[str, Any] = {}
        for name, tensor in weights.items():
            name = name.replace(".moe.", ".feed_forward.")  # early checkpoints' name of the mixtures
            name = _ROUTER.sub(".feed_forward.gate.weight", name)  # SparseMoE's name of the router
            first = _FIRST_EXPERT.match(name)
            if first and not a.is_moe(int(first[2])):  # a dense layer saved as one expert (Jamba v0.1)
                name = first[1] + name[first.end() :]
            out[name] = tensor
        out = from_gguf_layout(out, a.num_hidden_layers, MAMBA_PREFIX)
        for i in range(a.num_hidden_layers):
            if not a.is_attention(i):
                name, inner = MAMBA_PREFIX.format(i) + "conv1d.weight", a.mamba_expand * a.hidden_size
                check_conv_weight(out, name, inner, a.mamba_d_conv, f"mamba_expand * hidden_size = {inner}")
        out = stack_experts(out, a.num_experts, "num_experts")
        return super(HybridLM, self).sanitize(out)


# ---- GGUF ---------------------------------------------------------------------------------------------------

_MAMBA = MAMBA_PREFIX.replace("{}", "{N}")
GGUF_TENSOR_NAMES = (
    {
        f"blk.{{N}}.{gguf}": _MAMBA + hf
        for gguf, hf in (
            ("ssm_in", "in_proj"),
            ("ssm_conv1d", "conv1d"),
            ("ssm_x", "x_proj"),
            ("ssm_dt", "dt_proj"),
            ("ssm_a", "A"),
            ("ssm_d", "D"),
            ("ssm_out", "out_proj"),
            ("ssm_dt_norm", "dt_layernorm"),
            ("ssm_b_norm", "b_layernorm"),
            ("ssm_c_norm", "c_layernorm"),
        )
    }
    | {
        "output_norm": "model.final_layernorm",
        "blk.{N}.ffn_norm": "model.layers.{N}.pre_ff_layernorm",
        "blk.{N}.ffn_gate": "model.layers.{N}.feed_forward.gate_proj",
        "blk.{N}.ffn_up": "model.layers.{N}.feed_forward.up_proj",
        "blk.{N}.ffn_down": "model.layers.{N}.feed_forward.down_proj",
    }
    | {k: v.replace(".mlp.", ".feed_forward.") for k, v in GGUF_EXPERT_NAMES.items()}
)
GGUF_QK_PERMUTED: frozenset[str] = frozenset()


GGUF_CONFIG_READS_TENSORS = True  # the expert layers are the ones with expert tensors


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's jamba: the attention layers are those with attn_q, the mixture layers those with
    ffn_gate_exps (the file keeps neither period); each set must be every period-th layer from an offset."""
    n = config["num_hidden_layers"]
    attention = [i for i in range(n) if f"blk.{i}.attn_q.weight" in shapes]
    experts = [i for i in range(n) if f"blk.{i}.ffn_gate_exps.weight" in shapes]
    attn_period, attn_offset = _period(attention, n, "attention")
    expert_period, expert_offset = _period(experts, n, "mixture-of-experts")
    kv = get("attention.head_count_kv")
    return config | {
        "model_type": "jamba",
        "architectures": ["JambaForCausalLM"],
        "attn_layer_period": attn_period,
        "attn_layer_offset": attn_offset,
        "expert_layer_period": expert_period,
        "expert_layer_offset": expert_offset,
        "num_experts": int(get("expert_count", 1)) if experts else 1,
        "num_key_value_heads": int(max(kv)) if isinstance(kv, list) else int(kv),
        "mamba_d_state": int(get("ssm.state_size")),
        "mamba_d_conv": int(get("ssm.conv_kernel")),
        "mamba_expand": int(get("ssm.inner_size")) // config["hidden_size"],
        "mamba_dt_rank": int(get("ssm.time_step_rank")),
    }


def _period(layers: list[int], n: int, what: str) -> tuple[int, int]:
    """(period, offset) of layers that are every period-th layer from offset; (n + 1, n) for none."""
    if not layers:
        return n + 1, n
    period = layers[1] - layers[0] if len(layers) > 1 else n
    offset = layers[0] % period
    if layers != list(range(offset, n, period)):
        raise CheckpointError(f"the file's {what} layers {layers} are not every k-th layer from an offset")
    return period, offset
