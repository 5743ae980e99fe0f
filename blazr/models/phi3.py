"""Phi-3, Phi-3.5 and Phi-4 dense decoders (HF Phi3ForCausalLM, model_type phi3; GGUF phi3).

Llama's pre-norm RMSNorm blocks and SwiGLU MLP, stored with q/k/v as one `qkv_proj` tensor and gate/up as one
`gate_up_proj` tensor (gate rows first), no biases. The long-context releases use LongRoPE (per-frequency
short/long divisors and an attention factor; layers.rope._longrope says which table is used), Phi-4-mini rotates
only part of each head (partial_rotary_factor 0.75), and a config's sliding_window applies to every layer, as in
transformers' Phi3 model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from blazr.errors import CheckpointError, UnsupportedError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.rope import rope_type


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "phi3"
    vocab_size: int = 32064
    hidden_size: int = 3072
    intermediate_size: int = 8192
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 4096
    # transformers' Phi3Config: this top-level key (default 4096) overrides the one in rope_scaling
    original_max_position_embeddings: int = 4096
    rope_factors_long: list[float] | None = None  # GGUF: the rope_factors_long tensor (loaders.gguf)
    rope_factors_short: list[float] | None = None  # GGUF: the rope_factors_short tensor
    rope_attn_factor: float | None = None  # GGUF: rope.scaling.attn_factor
    rope_dimension_count: int | None = None  # GGUF: llama.cpp's n_rot, the rotated features of a head

    def __post_init__(self):
        super().__post_init__()
        scaling = self.rope_scaling or self.rope_parameters or {}
        # transformers: a partial_rotary_factor inside the rope dict wins over the top-level one
        self.partial_rotary_factor = scaling.get("partial_rotary_factor", self.partial_rotary_factor)
        if self.rope_factors_long is not None or self.rope_factors_short is not None:
            self.rope_scaling = self._gguf_longrope()
        elif self.rope_scaling:
            self.rope_scaling = self._hf_longrope(dict(self.rope_scaling))

    def _hf_longrope(self, scaling: dict[str, Any]) -> dict[str, Any] | None:
        kind = rope_type(scaling)
        if kind == "default":
            return None
        if kind == "yarn":  # transformers' Phi3Config reads an old "yarn" (like "su") as LongRoPE
            kind = "longrope"
        if kind != "longrope":
            raise UnsupportedError(
                f"rope_scaling type {kind!r} is not supported for Phi-3; it uses 'longrope' (or none), as "
                "transformers' Phi3Config requires"
            )
        scaling["rope_type"] = "longrope"
        scaling["original_max_position_embeddings"] = self.original_max_position_embeddings
        return scaling

    def _gguf_longrope(self) -> dict[str, Any]:
        """llama.cpp's reading of a phi3 file: both factor tensors, n_rot / 2 values each, and
        rope.scaling.attn_factor (1 when absent) on cos and sin."""
        tables = {"long_factor": self.rope_factors_long, "short_factor": self.rope_factors_short}
        for key, values in tables.items():
            tensor = f"rope_factors_{key.split('_')[0]}.weight"
            if values is None or len(values) != self.rot_dim // 2:
                found = "missing" if values is None else f"{len(values)} values"
                raise CheckpointError(
                    f"GGUF tensor {tensor} is {found}; LongRoPE needs {self.rot_dim // 2} "
                    f"(rope.dimension_count {self.rot_dim} / 2)"
                )
        attention_factor = 1.0 if self.rope_attn_factor is None else float(self.rope_attn_factor)
        return {
            "rope_type": "longrope",
            "original_max_position_embeddings": self.original_max_position_embeddings,
            "attention_factor": attention_factor,
            **tables,
        }

    @property
    def rot_dim(self) -> int:
        if self.rope_dimension_count is not None:
            return self.rope_dimension_count
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def qkv_bias(self) -> bool:
        return False  # Phi-3 has no attention biases

    @property
    def o_bias(self) -> bool:
        return False

    def layer_window(self, layer: int) -> int:
        """transformers' Phi3 model masks every layer with sliding_window when the config sets one (Phi-3-mini
        2047, Phi-3.5 262144; llama.cpp ignores it). A GGUF's 0 marks none."""
        return self.sliding_window or 0


class Model(llama.Model):
    """The Llama-family model reading Phi-3's fused qkv_proj and gate_up_proj tensors."""

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        shape = replace(self.attention_shape, fused_qkv="qkv_proj")  # (Nq + 2 Nkv, D) rows q, k, v
        window = a.layer_window(layer)
        attn = Attention(be, shape, layer, self.inv_freq, window, self.attention_scaling)
        act = HF_ACTIVATIONS[a.hidden_act]
        mlp = GatedMLP(be, a.hidden_size, a.intermediate_size, act, layer, fused_gate_up="gate_up_proj")
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = super().sanitize(weights)
        split = next((n for n in weights if n.endswith("self_attn.q_proj.weight")), None)
        if split is not None:  # llama.cpp accepts split q/k/v in a phi3 file; its converter never writes them
            raise CheckpointError(
                f"tensor {split!r}: this Phi-3 checkpoint stores q, k and v apart; blazr reads Phi-3's one "
                "qkv_proj tensor (GGUF attn_qkv) only"
            )
        return weights


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.attn_qkv": "model.layers.{N}.self_attn.qkv_proj",
    "blk.{N}.ffn_up": "model.layers.{N}.mlp.gate_up_proj",  # (2F, D): gate rows, then up rows
}
# one (n_rot/2,) F32 tensor each for the whole model (llama.cpp reuses it in every layer): config, not weights
GGUF_CONFIG_TENSORS = {
    "rope_factors_long.weight": "rope_factors_long",
    "rope_factors_short.weight": "rope_factors_short",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps Phi-3's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a phi3 file (llama-model.cpp, models/phi3.cpp): n_rot from rope.dimension_count,
    the original context from rope.scaling.original_context_length (default: the trained context), the LongRoPE
    attention factor from rope.scaling.attn_factor; the converter writes sliding_window 0 for none (Phi-4)."""
    return config | {
        "model_type": "phi3",
        "architectures": ["Phi3ForCausalLM"],
        "rope_dimension_count": int(get("rope.dimension_count", config["head_dim"])),
        "original_max_position_embeddings": int(
            get("rope.scaling.original_context_length", config["max_position_embeddings"])
        ),
        "rope_attn_factor": get("rope.scaling.attn_factor", None),
    }
