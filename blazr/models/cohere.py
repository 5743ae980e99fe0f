"""Command-R and Aya 23 (HF CohereForCausalLM, model_type cohere; GGUF command-r).

Parallel blocks (attention and the SwiGLU MLP both read one LayerNorm of the residual and both add to it),
LayerNorms without a bias, RoPE on adjacent feature pairs (GPT-J's interleaved rotation, not Llama's halves),
a tied head whose logits are multiplied by logit_scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import ParallelBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.norm import LayerNorm


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "cohere"
    layer_norm_eps: float = 1e-5
    logit_scale: float = 0.0625
    use_qk_norm: bool = False
    tie_word_embeddings: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.use_qk_norm:  # Command-R+: a LayerNorm per head with per-head weights, not built here
            raise UnsupportedError("cohere with use_qk_norm (Command-R+) is not supported")

    def layer_window(self, layer: int) -> int:
        return 0  # Command-R has no sliding window (Cohere2 / Command R7B does: another family)


class Model(llama.Model):
    """A Command-R causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        self.scale_logits(args.logit_scale)

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(self.be, dim, self.args.layer_norm_eps, bias=False)

    def make_block(self, layer: int) -> ParallelBlock:
        a, be = self.args, self.be
        s = self.attention_shape
        shape = AttentionShape(
            s.hidden, s.heads, s.kv_heads, s.head_dim, s.qkv_bias, s.o_bias, s.rot_dim, "interleaved"
        )
        attn = Attention(be, shape, layer, self.inv_freq, 0, self.attention_scaling)
        mlp = GatedMLP(
            be, a.hidden_size, a.intermediate_size, HF_ACTIVATIONS[a.hidden_act], layer, a.mlp_bias
        )
        return ParallelBlock(layer, attn, mlp, self.make_norm(a.hidden_size))


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES: dict[str, str] = {}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps the rows: llama.cpp rotates pairs too


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's command-r keys: attention.layer_norm_epsilon (required) and logit_scale (0 or absent: 1)."""
    return config | {
        "model_type": "cohere",
        "architectures": ["CohereForCausalLM"],
        "layer_norm_eps": float(get("attention.layer_norm_epsilon")),
        "logit_scale": float(get("logit_scale", 0.0)) or 1.0,
    }
