"""InternLM2 and InternLM2.5 (HF InternLM2ForCausalLM, model_type internlm2, remote code; GGUF internlm2).

The Llama computation under other names (tok_embeddings, attention.wqkv / wo, attention_norm, ffn_norm,
feed_forward.w1 / w3 / w2, output) with q/k/v packed in one `wqkv` tensor in grouped order: for each KV head,
its H / Hkv query heads, then its key head, then its value head. sanitize reorders those rows into the q, k, v
blocks the attention layer multiplies as one matrix. llama.cpp's converter splits wqkv into Llama's attn_q/k/v
(q and k permuted as Llama's), so a GGUF file runs as a Llama model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import CheckpointError
from blazr.models import llama
from blazr.models.base import HF_ACTIVATIONS, host_array
from blazr.models.decoder import PreNormBlock
from blazr.models.layers.attention import Attention, AttentionShape
from blazr.models.layers.mlp import GatedMLP

BLOCK_NAMES = ("attention_norm.", "attention.", "ffn_norm.", "feed_forward.")


@dataclass
class ModelArgs(llama.ModelArgs):
    model_type: str = "internlm2"
    bias: bool = False  # wqkv and wo biases

    @property
    def qkv_bias(self) -> bool:
        return self.bias

    @property
    def o_bias(self) -> bool:
        return self.bias

    def layer_window(self, layer: int) -> int:
        return 0


class Model(llama.Model):
    """An InternLM2 causal LM on one backend: `model(batch, cache)` -> logits (R, V)."""

    EMBED, HEAD = "model.tok_embeddings.", "output."

    def make_block(self, layer: int) -> PreNormBlock:
        a, be, s = self.args, self.be, self.attention_shape
        shape = AttentionShape(
            s.hidden,
            s.heads,
            s.kv_heads,
            s.head_dim,
            s.qkv_bias,
            s.o_bias,
            s.rot_dim,
            fused_qkv="wqkv",
            o_name="wo",
        )
        attn = Attention(be, shape, layer, self.inv_freq, 0, self.attention_scaling)
        act = HF_ACTIVATIONS[a.hidden_act]
        mlp = GatedMLP(be, a.hidden_size, a.intermediate_size, act, layer, names=("w1", "w3", "w2"))
        norms = self.make_norm(a.hidden_size), self.make_norm(a.hidden_size)
        return PreNormBlock(layer, attn, mlp, *norms, names=BLOCK_NAMES)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        weights = super().sanitize(weights)
        a = self.args
        group = a.num_attention_heads // a.num_key_value_heads + 2  # rows of one KV group, in heads
        for i in range(a.num_hidden_layers):
            for kind in ("weight", "bias"):
                name = f"model.layers.{i}.attention.wqkv.{kind}"
                if name in weights:
                    weights[name] = _grouped_to_qkv(
                        host_array(weights[name]), a.num_key_value_heads, group, a.head_dim, name
                    )
        return weights


def _grouped_to_qkv(w: np.ndarray, kv_heads: int, group: int, head_dim: int, name: str) -> np.ndarray:
    """wqkv rows (Hkv * (H/Hkv + 2) * Dh, ...) in groups [q..., k, v] -> all q heads, all k, all v."""
    if w.shape[0] != kv_heads * group * head_dim:
        raise CheckpointError(f"{name} has {w.shape[0]} rows, expected {kv_heads * group * head_dim}")
    g = w.reshape(kv_heads, group, head_dim, *w.shape[1:])  # (Hkv, H/Hkv + 2, Dh, ...)
    q = g[:, :-2].reshape(-1, *w.shape[1:])  # (H * Dh, ...) query heads in order
    k = g[:, -2].reshape(-1, *w.shape[1:])  # (Hkv * Dh, ...)
    v = g[:, -1].reshape(-1, *w.shape[1:])  # (Hkv * Dh, ...)
    return np.ascontiguousarray(np.concatenate([q, k, v]))


# ---- GGUF: llama.cpp's converter wrote the Llama layout ----------------------------------------------------

GGUF_TENSOR_NAMES: dict[str, str] = {}
GGUF_QK_PERMUTED = frozenset({"internlm2"})


def gguf_config(arch: str, get, config: dict[str, Any]) -> dict[str, Any]:
    return config | {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
