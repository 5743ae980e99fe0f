"""Mamba (HF MambaForCausalLM, model_type mamba; GGUF mamba) and Falcon-Mamba (FalconMambaForCausalLM,
falcon_mamba): pre-norm Mamba (1) mixers (blazr.models.layers.mamba1), no attention.

The Mamba2 model's skeleton (blazr.models.mamba2: `backbone.` names, x + mixer(RMSNorm(x)), a state slot per
running sequence) with the selective-scan mixer; Falcon-Mamba RMS-normalises the mixer's dt, B and C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blazr.errors import ConfigError
from blazr.models import mamba2
from blazr.models.base import BaseModelArgs
from blazr.models.layers.mamba1 import MambaMixer, MambaShape
from blazr.models.layers.ssm import check_conv_weight


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "mamba"
    hidden_size: int = 768
    num_hidden_layers: int = 32
    vocab_size: int = 50280
    state_size: int = 16
    expand: int = 2
    intermediate_size: int | None = None  # (optional) default: expand * hidden_size
    conv_kernel: int = 4
    time_step_rank: int | str = "auto"
    layer_norm_epsilon: float = 1e-5
    mixer_rms_eps: float = 1e-6  # Falcon-Mamba's norms of dt, B and C
    use_bias: bool = False
    use_conv_bias: bool = True
    hidden_act: str = "silu"
    tie_word_embeddings: bool = True
    max_position_embeddings: int = mamba2.UNBOUNDED_CONTEXT

    ALIASES = {"rms_norm_eps": "layer_norm_epsilon", "d_model": "hidden_size", "n_layer": "num_hidden_layers"}

    def __post_init__(self):
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act {self.hidden_act!r}: Mamba's convolution runs SiLU only")
        self.intermediate_size = self.intermediate_size or self.expand * self.hidden_size
        if self.time_step_rank == "auto":
            self.time_step_rank = math.ceil(self.hidden_size / 16)

    @property
    def mamba_shape(self) -> MambaShape:
        rms = self.mixer_rms_eps if self.model_type == "falcon_mamba" else None
        return MambaShape(
            self.hidden_size,
            self.intermediate_size,
            self.state_size,
            self.conv_kernel,
            int(self.time_step_rank),
            self.use_bias,
            self.use_conv_bias,
            rms,
        )


class Model(mamba2.Model):
    """A Mamba or Falcon-Mamba causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> mamba2.Mamba2Block:
        mixer = MambaMixer(self.be, self.args.mamba_shape, layer)
        return mamba2.Mamba2Block(layer, mixer, self.make_norm(self.args.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        a = self.args
        weights = mamba2.from_gguf_layout(weights, a.num_hidden_layers, "backbone.layers.{}.mixer.")
        for i in range(a.num_hidden_layers):
            name = f"backbone.layers.{i}.mixer.conv1d.weight"
            check_conv_weight(
                weights, name, a.intermediate_size, a.conv_kernel, f"intermediate_size {a.intermediate_size}"
            )
        return super(mamba2.Model, self).sanitize(weights)


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = mamba2.GGUF_TENSOR_NAMES | {
    "blk.{N}.ssm_x": "backbone.layers.{N}.mixer.x_proj",
    "blk.{N}.ssm_dt": "backbone.layers.{N}.mixer.dt_proj",
    "blk.{N}.ssm_dt.bias": "backbone.layers.{N}.mixer.dt_proj.bias",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's mamba keys: ssm.inner_size, ssm.state_size, ssm.conv_kernel, ssm.time_step_rank, and
    ssm.dt_b_c_rms for Falcon-Mamba."""
    falcon = bool(get("ssm.dt_b_c_rms", False))
    return config | {
        "model_type": "falcon_mamba" if falcon else "mamba",
        "architectures": ["FalconMambaForCausalLM" if falcon else "MambaForCausalLM"],
        "intermediate_size": int(get("ssm.inner_size")),
        "state_size": int(get("ssm.state_size")),
        "conv_kernel": int(get("ssm.conv_kernel")),
        "time_step_rank": int(get("ssm.time_step_rank")),
        "layer_norm_epsilon": config["rms_norm_eps"],
        "max_position_embeddings": mamba2.UNBOUNDED_CONTEXT,
    }
