"""StarCoder2 code models (HF Starcoder2ForCausalLM, model_type starcoder2; GGUF starcoder2).

Llama's layout with GPT-style parts: pre-norm blocks of LayerNorm with a bias (norm_epsilon), attention with
GQA and biases on q/k/v and the output (use_bias), a plain MLP c_fc -> GELU-tanh -> c_proj (biases with
use_bias), an optional sliding window on every layer, and a tied or separate LM head without bias.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention
from blazr.models.layers.mlp import MLP
from blazr.models.layers.norm import LayerNorm


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "starcoder2"
    hidden_size: int = 3072
    intermediate_size: int = 12288
    num_hidden_layers: int = 30
    num_attention_heads: int = 24
    num_key_value_heads: int | None = 2
    norm_epsilon: float = 1e-5
    use_bias: bool = True  # biases on q/k/v, the output projection and both MLP projections
    hidden_act: str = "gelu_pytorch_tanh"
    max_position_embeddings: int = 4096
    vocab_size: int = 49152
    tie_word_embeddings: bool = True
    sliding_window: int | None = None  # on every layer when set

    @property
    def qkv_bias(self) -> bool:
        return self.use_bias

    @property
    def o_bias(self) -> bool:
        return self.use_bias

    def layer_window(self, layer: int) -> int:
        # transformers' Starcoder2 masks every layer with the window when the config names one
        return self.sliding_window or 0


class Model(llama.Model):
    """A StarCoder2 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(self.be, dim, self.args.norm_epsilon)  # always with a bias (nn.LayerNorm)

    def make_block(self, layer: int) -> PreNormBlock:
        a, be = self.args, self.be
        attn = Attention(
            be, self.attention_shape, layer, self.inv_freq, a.layer_window(layer), self.attention_scaling
        )
        act = HF_ACTIVATIONS[a.hidden_act]
        mlp = MLP(be, a.hidden_size, a.intermediate_size, act, layer, a.use_bias, names=("c_fc", "c_proj"))
        return PreNormBlock(layer, attn, mlp, self.make_norm(a.hidden_size), self.make_norm(a.hidden_size))


# ---- GGUF: how llama.cpp's converter wrote this family ------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.ffn_up": "model.layers.{N}.mlp.c_fc",
    "blk.{N}.ffn_down": "model.layers.{N}.mlp.c_proj",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps StarCoder2's q/k rows as they are


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a starcoder2 file (src/models/starcoder2.cpp): LayerNorms with
    attention.layer_norm_epsilon, biases on every projection, GELU-tanh, and no sliding window (the converter
    does not write one, so a file of a windowed model runs with full attention, as in llama.cpp)."""
    return config | {
        "model_type": "starcoder2",
        "architectures": ["Starcoder2ForCausalLM"],
        "norm_epsilon": float(get("attention.layer_norm_epsilon")),
        "use_bias": config["attention_bias"],
        "hidden_act": "gelu_pytorch_tanh",
    }
