"""What the attention + Mamba2 hybrids share (Bamba, Granite-4.0-H): the mamba_* config keys and a DecoderLM
mix-in whose cache holds a paged (k, v) pair for each attention layer and an SSMStateCache for each Mamba layer.

A hybrid's blocks are PreNormBlocks whose mixer (the block's `self_attn`) is an Attention or a Mamba2Mixer, by
`args.is_attention(layer)`; the checkpoint names the Mamba layers' mixer `model.layers.N.mamba.`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blazr.errors import ConfigError
from blazr.models.base import Array
from blazr.models.batch import ForwardBatch
from blazr.models.cache import SSMStateCache
from blazr.models.layers.ssm import SSMShape, check_ssm_tensors
from blazr.models.mamba2 import from_gguf_layout, with_state_slots

MAMBA_PREFIX = "model.layers.{}.mamba."


@dataclass
class MambaArgs:
    """The Mamba2 mixer's keys in a hybrid's config (HF BambaConfig / GraniteMoeHybridConfig spellings)."""

    mamba_n_heads: int = 128
    mamba_d_head: int | str = "auto"
    mamba_n_groups: int = 1
    mamba_d_state: int = 256
    mamba_d_conv: int = 4
    mamba_expand: int = 2
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False
    time_step_limit: tuple[float, float] | list[float] | None = (0.0, math.inf)

    INNER_KEYS = "mamba_expand * hidden_size"  # what sets the mixer's inner size (a family may say otherwise)

    @property
    def mamba_inner(self) -> int:
        """The mixer's inner size d_inner (Falcon-H1 gives it as mamba_d_ssm)."""
        return self.mamba_expand * self.hidden_size  # type: ignore[attr-defined]

    def check_mamba(self) -> None:
        """Resolve mamba_d_head "auto" and check the sizes agree (one message naming the keys)."""
        inner = self.mamba_inner
        if self.mamba_d_head == "auto":
            self.mamba_d_head = inner // self.mamba_n_heads
        if int(self.mamba_d_head) * self.mamba_n_heads != inner:
            raise ConfigError(
                f"mamba_n_heads * mamba_d_head ({self.mamba_n_heads} * {self.mamba_d_head}) must equal "
                f"{self.INNER_KEYS} ({inner})"
            )
        if self.mamba_n_groups < 1 or self.mamba_n_heads % self.mamba_n_groups:
            raise ConfigError(
                f"mamba_n_groups={self.mamba_n_groups} must divide mamba_n_heads={self.mamba_n_heads}"
            )
        if self.hidden_act != "silu":  # type: ignore[attr-defined]
            raise ConfigError(f"hidden_act {self.hidden_act!r}: the Mamba layers run SiLU only")  # type: ignore[attr-defined]

    def is_attention(self, layer: int) -> bool:
        raise NotImplementedError

    @property
    def ssm_shape(self) -> SSMShape:
        lo, hi = self.time_step_limit or (0.0, math.inf)
        return SSMShape(
            self.hidden_size,  # type: ignore[attr-defined]
            self.mamba_n_heads,
            int(self.mamba_d_head),
            self.mamba_n_groups,
            self.mamba_d_state,
            self.mamba_d_conv,
            self.rms_norm_eps,  # type: ignore[attr-defined]
            self.mamba_proj_bias,
            self.mamba_conv_bias,
            (float(lo), float(hi)),
        )


class HybridLM:
    """Mixed in before a DecoderLM: the typed cache, state slots for batches from outside the engine, and the
    Mamba layers' GGUF layout and tensor checks."""

    args: Any
    be: Any
    dtype: str
    kv_dtype: str | None
    layers: list
    stateful = True  # blazr.models.cache: state slots, no prefix cache

    def make_cache(self, num_blocks: int, block_size: int, num_seqs: int = 1) -> list:
        """Per attention layer (k, v), each (num_blocks * block_size, Hkv, Dh); per Mamba layer an
        SSMStateCache of num_seqs slots."""
        shape = (num_blocks * block_size, self.args.num_key_value_heads, self.args.head_dim)
        cache: list = []
        for i, layer in enumerate(self.layers):
            if self.args.is_attention(i):
                dtype = self.kv_dtype or self.dtype  # blazr.engine.kv_dtype
                cache.append((self.be.empty(shape, dtype), self.be.empty(shape, dtype)))
            else:
                cache.append(SSMStateCache(*layer.self_attn.make_state(num_seqs)))
        return cache

    def __call__(self, batch: ForwardBatch, cache: list) -> Array:
        return super().__call__(with_state_slots(batch), cache)  # type: ignore[misc]

    def hidden(self, batch: ForwardBatch, cache: list) -> Array:
        return super().hidden(with_state_slots(batch), cache)  # type: ignore[misc]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = from_gguf_layout(weights, self.args.num_hidden_layers, MAMBA_PREFIX)
        for i in range(self.args.num_hidden_layers):
            if not self.args.is_attention(i):
                check_ssm_tensors(weights, MAMBA_PREFIX.format(i), self.args.ssm_shape)
        return super().sanitize(weights)  # type: ignore[misc]


# llama.cpp's names of a Mamba layer's mixer (granitehybrid), shared by the hybrids' GGUF tables
GGUF_MAMBA_NAMES = {
    f"blk.{{N}}.{gguf}": MAMBA_PREFIX.replace("{}", "{N}") + hf
    for gguf, hf in (
        ("ssm_in", "in_proj"),
        ("ssm_conv1d", "conv1d"),
        ("ssm_dt.bias", "dt_bias"),
        ("ssm_a", "A"),
        ("ssm_d", "D"),
        ("ssm_norm", "norm"),
        ("ssm_out", "out_proj"),
    )
}


def gguf_mamba_config(get, config: dict[str, Any]) -> dict[str, Any]:
    """granitehybrid's keys: head_count_kv per layer (0 on Mamba layers) and the ssm.* sizes, as HF's keys
    (attention layers are listed as attn_layer_indices; a family turns them into its own spelling)."""
    kv = get("attention.head_count_kv")
    kv_per_layer = list(kv) if isinstance(kv, list) else [int(kv)] * config["num_hidden_layers"]
    inner, heads = int(get("ssm.inner_size")), int(get("ssm.time_step_rank"))
    return {
        "attn_layer_indices": [i for i, n in enumerate(kv_per_layer) if n],
        "num_key_value_heads": max(kv_per_layer),
        "mamba_n_heads": heads,
        "mamba_d_head": inner // heads,
        "mamba_expand": inner // config["hidden_size"],
        "mamba_d_state": int(get("ssm.state_size")),
        "mamba_n_groups": int(get("ssm.group_count", 1)),
        "mamba_d_conv": int(get("ssm.conv_kernel")),
    }
