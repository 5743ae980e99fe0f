"""Mamba2 (HF Mamba2ForCausalLM, model_type mamba2; GGUF mamba2): a stack of pre-norm Mamba2 mixers, no attention.

Each layer is x + mixer(RMSNorm(x)) (blazr.models.layers.ssm); the model keeps no per-token cache, only one
conv window and one SSM state per layer and running sequence (an SSMStateCache of `num_seqs` slots), so its
memory and per-token cost stay flat in the context length. Checkpoint names live under `backbone.`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import ConfigError
from blazr.models.base import Array, BaseModelArgs, Step, host_array, trace
from blazr.models.batch import ForwardBatch
from blazr.models.cache import SSMStateCache
from blazr.models.decoder import DecoderLM
from blazr.models.layers.module import Module
from blazr.models.layers.norm import RMSNorm
from blazr.models.layers.ssm import Mamba2Mixer, SSMShape, check_ssm_tensors

# no positions to run out of: llama.cpp's converter writes 2^20 as the context length of a state-space model
UNBOUNDED_CONTEXT = 1 << 20


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "mamba2"
    hidden_size: int = 4096
    num_hidden_layers: int = 64
    vocab_size: int = 32768
    num_heads: int = 128
    head_dim: int = 64
    state_size: int = 128
    n_groups: int = 8
    expand: int = 2
    conv_kernel: int = 4
    layer_norm_epsilon: float = 1e-5
    use_bias: bool = False
    use_conv_bias: bool = True
    hidden_act: str = "silu"
    time_step_limit: tuple[float, float] | list[float] = (0.0, math.inf)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = UNBOUNDED_CONTEXT

    ALIASES = {"rms_norm_eps": "layer_norm_epsilon", "d_model": "hidden_size", "n_layer": "num_hidden_layers"}

    def __post_init__(self):
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act {self.hidden_act!r}: Mamba2's convolution runs SiLU only")
        if self.num_heads * self.head_dim != self.expand * self.hidden_size:
            raise ConfigError(
                f"num_heads * head_dim ({self.num_heads} * {self.head_dim}) must equal expand * hidden_size "
                f"({self.expand} * {self.hidden_size}): the checkpoint's sizes disagree"
            )
        if self.n_groups < 1 or self.num_heads % self.n_groups:
            raise ConfigError(f"n_groups={self.n_groups} must divide num_heads={self.num_heads}")

    @property
    def ssm_shape(self) -> SSMShape:
        lo, hi = self.time_step_limit
        return SSMShape(
            self.hidden_size,
            self.num_heads,
            self.head_dim,
            self.n_groups,
            self.state_size,
            self.conv_kernel,
            self.layer_norm_epsilon,
            self.use_bias,
            self.use_conv_bias,
            (float(lo), float(hi)),
        )


class Mamba2Block(Module):
    """x + mixer(norm(x)): HF Mamba2Block."""

    OPS = ("binary",)

    def __init__(self, layer: int, mixer: Mamba2Mixer, norm: RMSNorm):
        self.layer, self.mixer, self.norm = layer, mixer, norm

    def children(self) -> dict[str, Module]:
        return {"norm.": self.norm, "mixer.": self.mixer}

    def __call__(self, x: Array, step: Step, conv_states: Array, ssm_states: Array) -> Array:
        h = self.norm(x)  # (T, D)
        trace("attn_norm", self.layer, h)
        x = self.mixer.be.binary("add", x, self.mixer(h, step, conv_states, ssm_states))  # (T, D)
        trace("l_out", self.layer, x)
        return x


class Model(DecoderLM):
    """A Mamba2 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    EMBED, LAYERS, NORM, HEAD = "backbone.embeddings.", "backbone.layers.{}.", "backbone.norm_f.", "lm_head."
    stateful = True  # blazr.models.cache: state slots, no prefix cache

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(self.be, dim, self.args.layer_norm_epsilon)

    def make_block(self, layer: int) -> Mamba2Block:
        mixer = Mamba2Mixer(self.be, self.args.ssm_shape, layer)
        return Mamba2Block(layer, mixer, self.make_norm(self.args.hidden_size))

    KV_DTYPE_CHOICE = False  # no keys and values: recurrent state only

    def make_cache(self, num_blocks: int, block_size: int, num_seqs: int = 1) -> list[SSMStateCache]:
        """Per layer the states of num_seqs sequences; no paged KV (num_blocks is not used)."""
        return [SSMStateCache(*layer.mixer.make_state(num_seqs)) for layer in self.layers]

    def __call__(self, batch: ForwardBatch, cache: list[SSMStateCache]) -> Array:
        return super().__call__(with_state_slots(batch), cache)

    def hidden(self, batch: ForwardBatch, cache: list[SSMStateCache]) -> Array:
        return super().hidden(with_state_slots(batch), cache)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = from_gguf_layout(weights, self.args.num_hidden_layers, "backbone.layers.{}.mixer.")
        shape = self.args.ssm_shape
        for i in range(self.args.num_hidden_layers):
            check_ssm_tensors(weights, f"backbone.layers.{i}.mixer.", shape)
        return super().sanitize(weights)


def with_state_slots(batch: ForwardBatch) -> ForwardBatch:
    """A batch from outside the engine (tests, tools) names no state slots: sequence b takes slot b."""
    if batch.state_slots is not None:
        return batch
    return dataclasses.replace(batch, state_slots=np.arange(len(batch.q_lens), dtype=np.int32))


def from_gguf_layout(weights: dict[str, Any], layers: int, mixer: str) -> dict[str, Any]:
    """llama.cpp's converter stores A = -exp(A_log) (Mamba2: as (H, 1)), D as (H, 1), the conv weight as (C, K)
    and the gated norm's weight as (G, d_inner / G): back to the HF names and shapes (A_log recovered in
    float64, so A round-trips exactly)."""
    out = dict(weights)
    for i in range(layers):
        p = mixer.format(i)
        if p + "A" in out:  # Mamba2's (H, 1) as (H,); Mamba 1's (d_inner, N) as it is
            a = host_array(out.pop(p + "A")).astype(np.float64)
            out[p + "A_log"] = np.log(-(a.reshape(-1) if a.shape[-1] == 1 else a))
        if p + "D" in out and len(out[p + "D"].shape) == 2:
            out[p + "D"] = host_array(out[p + "D"]).reshape(-1)  # (H,)
        conv = out.get(p + "conv1d.weight")
        if conv is not None and len(conv.shape) == 2:
            c, k = conv.shape
            out[p + "conv1d.weight"] = host_array(conv).reshape(c, 1, k)  # (C, 1, K)
        norm = out.get(p + "norm.weight")
        if norm is not None and len(norm.shape) == 2:
            out[p + "norm.weight"] = host_array(norm).reshape(-1)  # (d_inner,)
    return out


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "token_embd": "backbone.embeddings",
    "output_norm": "backbone.norm_f",
    "blk.{N}.attn_norm": "backbone.layers.{N}.norm",
    "blk.{N}.ssm_in": "backbone.layers.{N}.mixer.in_proj",
    "blk.{N}.ssm_conv1d": "backbone.layers.{N}.mixer.conv1d",
    "blk.{N}.ssm_dt.bias": "backbone.layers.{N}.mixer.dt_bias",
    "blk.{N}.ssm_a": "backbone.layers.{N}.mixer.A",
    "blk.{N}.ssm_d": "backbone.layers.{N}.mixer.D",
    "blk.{N}.ssm_norm": "backbone.layers.{N}.mixer.norm",
    "blk.{N}.ssm_out": "backbone.layers.{N}.mixer.out_proj",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp writes ssm.inner_size (d_inner), ssm.state_size, ssm.group_count, ssm.conv_kernel and the head
    count as ssm.time_step_rank."""
    inner, heads = int(get("ssm.inner_size")), int(get("ssm.time_step_rank"))
    return config | {
        "model_type": "mamba2",
        "architectures": ["Mamba2ForCausalLM"],
        "num_heads": heads,
        "head_dim": inner // heads,
        "expand": inner // config["hidden_size"],
        "state_size": int(get("ssm.state_size")),
        "n_groups": int(get("ssm.group_count", 1)),
        "conv_kernel": int(get("ssm.conv_kernel")),
        "layer_norm_epsilon": config["rms_norm_eps"],
        "max_position_embeddings": UNBOUNDED_CONTEXT,
    }
