"""SandwichBlock: Gemma 2 and 3's decoder block, norms before and after both attention and the MLP."""

from __future__ import annotations

from blazr.models.base import Array, Step, trace
from blazr.models.layers.module import Module


class SandwichBlock(Module):
    """x + post_norm(attn(norm(x))), then x + post_norm(mlp(pre_norm(x))): Gemma 2 and 3."""

    OPS = ("binary",)

    def __init__(self, layer: int, attn: Module, mlp: Module, norm):
        self.layer, self.self_attn, self.mlp = layer, attn, mlp
        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()

    def children(self) -> dict[str, Module]:
        return {
            "input_layernorm.": self.input_layernorm,
            "self_attn.": self.self_attn,
            "post_attention_layernorm.": self.post_attention_layernorm,
            "pre_feedforward_layernorm.": self.pre_feedforward_layernorm,
            "mlp.": self.mlp,
            "post_feedforward_layernorm.": self.post_feedforward_layernorm,
        }

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i = self.self_attn.be, self.layer
        h = self.input_layernorm(x)  # (T, D)
        trace("attn_norm", i, h)
        h = self.post_attention_layernorm(self.self_attn(h, step, k_cache, v_cache))  # (T, D)
        trace("attn_post_norm", i, h)
        x = be.binary("add", x, h)  # (T, D)
        trace("ffn_inp", i, x)
        h = self.pre_feedforward_layernorm(x)  # (T, D)
        trace("ffn_norm", i, h)
        h = self.post_feedforward_layernorm(self.mlp(h))  # (T, D)
        trace("ffn_post_norm", i, h)
        x = be.binary("add", x, h)  # (T, D)
        trace("l_out", i, x)
        return x
