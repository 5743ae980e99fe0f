"""Gemma 2 decoders (HF Gemma2ForCausalLM, model_type gemma2; GGUF gemma2).

Gemma (blazr.models.gemma) with sandwich blocks (RMSNorm before and after attention and MLP), attention
scores soft-capped to c * tanh(s / c) (attn_logit_softcapping, default 50) and so are the logits
(final_logit_softcapping, default 30), layers alternating sliding-window and full attention (even layers
sliding, by default), and the q.k scale query_pre_attn_scalar ** -0.5. One RoPE table for every layer; no
qk-norm (Gemma 3 added it and dropped the attention soft-cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.errors import UnsupportedError
from blazr.models import gemma
from blazr.models.decoder import SandwichBlock
from blazr.models.layers.attention import AttentionShape

LOCAL, GLOBAL = "sliding_attention", "full_attention"


@dataclass
class ModelArgs(gemma.ModelArgs):
    # defaults are transformers' Gemma2Config (gemma-2-2b)
    model_type: str = "gemma2"
    hidden_size: int = 2304
    intermediate_size: int = 9216
    num_hidden_layers: int = 26
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int = 256
    # transformers' Gemma 2 reads only hidden_activation (a hidden_act key is ignored)
    hidden_activation: str = "gelu_pytorch_tanh"
    query_pre_attn_scalar: float = 256
    sliding_window: int | None = 4096
    layer_types: list[str] | None = None  # (optional) LOCAL / GLOBAL per layer
    final_logit_softcapping: float | None = 30.0
    attn_logit_softcapping: float | None = 50.0

    activation_key = "hidden_activation"

    def __post_init__(self):
        if self.layer_types is None:  # transformers: layer i slides when i + 1 is odd
            self.layer_types = [LOCAL if (i + 1) % 2 else GLOBAL for i in range(self.num_hidden_layers)]
        if len(self.layer_types) != self.num_hidden_layers:
            raise UnsupportedError(
                f"layer_types lists {len(self.layer_types)} layers, num_hidden_layers is {self.num_hidden_layers}"
            )
        unknown = sorted(set(self.layer_types) - {LOCAL, GLOBAL})
        if unknown:
            raise UnsupportedError(f"layer_types {unknown} are not supported; use {LOCAL!r} or {GLOBAL!r}")
        super().__post_init__()

    @property
    def attention_scale(self) -> float:
        return self.query_pre_attn_scalar**-0.5

    def layer_window(self, layer: int) -> int:
        """Sliding-window length of one layer (0: full attention)."""
        return self.sliding_window if self.layer_types[layer] == LOCAL and self.sliding_window else 0


class Model(gemma.Model):
    """A Gemma 2 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        self.final_softcap = float(args.final_logit_softcapping or 0.0)

    def make_attention_shape(self, a: ModelArgs) -> AttentionShape:
        bias = a.attention_bias
        return AttentionShape(
            a.hidden_size,
            a.num_attention_heads,
            a.num_key_value_heads,
            a.head_dim,
            bias,
            bias,
            scale=a.attention_scale,
            softcap=float(a.attn_logit_softcapping or 0.0),
        )

    def make_block(self, layer: int) -> SandwichBlock:
        attn = self.make_attention(layer, self.args.layer_window(layer))
        return SandwichBlock(layer, attn, self.make_mlp(layer), lambda: self.make_norm(self.args.hidden_size))


# ---- GGUF ---------------------------------------------------------------------------------------------------

GGUF_TENSOR_NAMES = {
    "blk.{N}.post_attention_norm": "model.layers.{N}.post_attention_layernorm",
    "blk.{N}.ffn_norm": "model.layers.{N}.pre_feedforward_layernorm",
    "blk.{N}.post_ffw_norm": "model.layers.{N}.post_feedforward_layernorm",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # the converter keeps HF's half-split RoPE rows


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's reading of a gemma2 file (src/models/gemma2.cpp): soft-caps default to 50 and 30, the window
    to 4096 and its pattern to every 2nd layer full (layer 0 sliding); q is scaled by 1 / sqrt(head_dim) except
    in the 46-layer 27B (1 / sqrt(hidden / heads)): the converter writes no query_pre_attn_scalar. RoPE base
    10k unless written (the converter does not)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    swa_base = get("rope.freq_base_swa", None)
    if swa_base is not None and float(swa_base) != config["rope_theta"]:
        raise UnsupportedError(
            f"gemma2 GGUF with rope.freq_base_swa {swa_base} (sliding layers with their own RoPE base, "
            f"{config['rope_theta']} elsewhere) is not supported"
        )
    out = config | {
        "model_type": "gemma2",
        "architectures": ["Gemma2ForCausalLM"],
        "hidden_activation": "gelu_pytorch_tanh",  # llama.cpp's LLM_FFN_GELU is the tanh approximation
        "tie_word_embeddings": True,  # llama.cpp always reads the head from token_embd
        "query_pre_attn_scalar": config["hidden_size"] // heads if layers == 46 else config["head_dim"],
        "attn_logit_softcapping": float(get("attn_logit_softcapping", 50.0)),
        "final_logit_softcapping": float(get("final_logit_softcapping", 30.0)),
    }
    pattern = get("attention.sliding_window_pattern", 2)
    if isinstance(pattern, list):  # one flag a layer: True for sliding-window layers
        out["layer_types"] = [LOCAL if flag else GLOBAL for flag in pattern]
    else:  # llama.cpp's set_swa_pattern: layer i slides when i % n < n - 1; n 0 makes every layer slide
        n = int(pattern)
        out["layer_types"] = [LOCAL if n == 0 or i % n < n - 1 else GLOBAL for i in range(layers)]
    return out
