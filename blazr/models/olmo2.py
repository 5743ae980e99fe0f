"""OLMo 2 dense decoders (HF Olmo2ForCausalLM, model_type olmo2; GGUF olmo2).

Llama's attention and SwiGLU MLP with two differences: the norms come after attention and MLP instead of
before (PostNormBlock: x + norm(attn(x)), x + norm(mlp(x))), and q and k go through an RMSNorm over the whole
projection (all heads at once, not per head as in Qwen3) before RoPE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PostNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import GatedMLP


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "olmo2"
    rms_norm_eps: float = 1e-5

    qk_norm_per_head = False  # one RMSNorm over all H * Dh query features, one over all Hkv * Dh key features

    @property
    def qk_norm_eps(self) -> float | None:
        return self.rms_norm_eps

    def layer_window(self, layer: int) -> int:
        return 0  # OLMo 2 has no sliding window


class Model(llama.Model):
    """An OLMo 2 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_block(self, layer: int) -> PostNormBlock:
        a, be = self.args, self.be
        attn = Attention(be, self.attention_shape, layer, self.inv_freq, 0, self.attention_scaling)
        mlp = GatedMLP(
            be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_act], layer, a.mlp_bias
        )
        return PostNormBlock(layer, attn, mlp, lambda: self.make_norm(a.hidden_size))


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.attn_q_norm": "model.layers.{N}.self_attn.q_norm",
    "blk.{N}.attn_k_norm": "model.layers.{N}.self_attn.k_norm",
    "blk.{N}.post_attention_norm": "model.layers.{N}.post_attention_layernorm",
    "blk.{N}.post_ffw_norm": "model.layers.{N}.post_feedforward_layernorm",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps OLMo 2's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    if config.get("sliding_window"):  # OLMo 3 files carry a window pattern; its layers are not built here
        raise UnsupportedError("olmo2 GGUF with attention.sliding_window (OLMo 3) is not supported")
    return config | {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"]}
