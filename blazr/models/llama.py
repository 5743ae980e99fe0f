"""Llama-family dense decoders: Llama 1-3, Mistral and Qwen2 (HF model_type llama / mistral / qwen2).

Pre-norm blocks of RMSNorm, attention with fused q/k/v (Qwen2: with biases) and a SwiGLU MLP; Mistral and
Qwen2 may use a sliding window. Every tensor op goes through the layers and the backend; nothing here
branches on device or weight format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs
from blazr.models.decoder import DecoderLM, PreNormBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.moe import GGUF_EXPERT_NAMES
from blazr.models.layers.norm import RMSNorm
from blazr.models.layers.rope import device_rope, theta_and_scaling


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "llama"
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None  # (optional) default: num_attention_heads (no GQA)
    head_dim: int | None = None  # (optional) default: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None  # (optional) transformers v5 spelling of theta + scaling
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int = 2048
    vocab_size: int = 32000
    tie_word_embeddings: bool = False
    sliding_window: int | None = None  # Mistral; Qwen2 only with use_sliding_window
    use_sliding_window: bool = False  # Qwen2
    max_window_layers: int = 28  # Qwen2: layers from this index on use the window
    layer_types: list[str] | None = None  # (optional) "sliding_attention" / "full_attention" per layer
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"

    ALIASES = {"n_positions": "max_position_embeddings", "num_layers": "num_hidden_layers"}

    def __post_init__(self):
        self.num_key_value_heads = self.num_key_value_heads or self.num_attention_heads
        self.head_dim = self.head_dim or self.hidden_size // self.num_attention_heads
        self.rope_theta, self.rope_scaling = theta_and_scaling(
            self.rope_theta, self.rope_scaling, self.rope_parameters
        )
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.hidden_act not in HF_ACTIVATIONS:
            known = ", ".join(HF_ACTIVATIONS)
            raise UnsupportedError(f"hidden_act {self.hidden_act!r} is not supported; use one of {known}")

    @property
    def rot_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias or self.model_type == "qwen2"  # Qwen2 always has q/k/v biases

    @property
    def o_bias(self) -> bool:
        return self.attention_bias and self.model_type != "qwen2"

    @property
    def qk_norm_eps(self) -> float | None:
        return None  # no qk-norm in this family (Qwen3 and Gemma 3 have one)

    qk_norm_per_head = True  # (with qk_norm_eps) per head, or over the whole projection (OLMo 2)

    @property
    def attention_scale(self) -> float | None:
        return None  # q.k scale 1 / sqrt(head_dim) (Granite sets its own)

    def layer_window(self, layer: int) -> int:
        """Sliding-window length of one layer (0: full attention), as transformers decides it."""
        window = self.sliding_window
        if self.model_type == "llama" or (self.model_type == "qwen2" and not self.use_sliding_window):
            window = None
        if not window:
            return 0
        if self.layer_types is not None:
            return window if self.layer_types[layer] == "sliding_attention" else 0
        if self.model_type == "qwen2":
            return window if layer >= self.max_window_layers else 0
        return window


class Model(DecoderLM):
    """A Llama-family causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        self.inv_freq, self.attention_scaling = device_rope(
            backend, args.rot_dim, args.rope_theta, args.rope_scaling, args.max_position_embeddings
        )  # (R/2,) f32
        a = args
        self.attention_shape = AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            a.qkv_bias,
            a.o_bias,
            a.rot_dim,
            scale=a.attention_scale,
            qk_norm_eps=a.qk_norm_eps,
            qk_norm_per_head=a.qk_norm_per_head,
        )
        super().__init__(args, backend, dtype)

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(self.be, dim, self.args.rms_norm_eps)

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        window = a.layer_window(layer)
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, window, self.attention_scaling)
        mlp = GatedMLP(
            be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_act], layer, a.mlp_bias
        )
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))


# ---- GGUF: how llama.cpp's converter wrote this family ------------------------------------------------------

# general.architecture -> (HF model_type, architectures[0]); llama.cpp converts Mistral as "llama"
GGUF_MODEL_TYPES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "llama2": ("llama", "LlamaForCausalLM"),
    "llama3": ("llama", "LlamaForCausalLM"),
    "mistral": ("mistral", "MistralForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
}
# the generic table (loaders.gguf.GGUF_TO_HF) names a dense model's tensors; Mixtral's experts come as
# "llama" too: one 3-D tensor per projection, or (older converters) one 2-D tensor per expert
GGUF_TENSOR_NAMES: dict[str, str] = GGUF_EXPERT_NAMES | {
    f"blk.{{N}}.ffn_{part}.{{E}}": f"model.layers.{{N}}.mlp.experts.{{E}}.{hf}"
    for part, hf in (("gate", "w1"), ("up", "w3"), ("down", "w2"))
}
GGUF_QK_PERMUTED = frozenset({"llama", "mistral"})  # LlamaModel.permute interleaved their q/k rows for RoPE


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """The family's part of a GGUF file's HF config: its model_type and architecture."""
    model_type, hf_arch = GGUF_MODEL_TYPES[arch]
    if arch == "llama" and config.get("num_local_experts"):  # llama.cpp writes Mixtral as "llama"
        return config | {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"]}
    if arch == "llama" and config.get("sliding_window"):
        # HF Llama ignores sliding_window, Mistral applies it
        model_type, hf_arch = "mistral", "MistralForCausalLM"
    return config | {"model_type": model_type, "architectures": [hf_arch]}
