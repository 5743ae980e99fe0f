"""NomicBERT (model_type nomic_bert): nomic-embed-text v1 / v1.5, Ollama's and LM Studio's default embedder.

Embeddings: word + token type, then `emb_ln`; no position table, rotary positions instead (neox halves over the
whole head, base rotary_emb_base, positions restarting at 0 in each sequence). Post-norm blocks
`encoder.layers.N.`: x = norm1(x + attn(x)), x = norm2(x + mlp(x)). Attention: one fused `attn.Wqkv` (3D, D)
and `attn.out_proj`, no biases. The MLP is SwiGLU: fc2(fc11(x) * silu(fc12(x))), no biases.

Configs come in two spellings: the hub's (nomic's own GPT-2-style keys: n_embd, n_head, n_layer, n_inner,
n_positions, layer_norm_epsilon, rotary_emb_base, activation_function "swiglu") and transformers' NomicBertConfig
(hidden_size, ..., rope_parameters, hidden_act "silu"); both read here. The hub's options that change the
network away from what nomic-embed-text ships (biases, pre-norm, interleaved or partial rotary, rotary scaling)
are refused by name: neither transformers' class nor llama.cpp runs them. GGUF: llama.cpp's "nomic-bert".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import BaseModelArgs
from blazr.models.encoder import EncoderModel, PostNormEncoderBlock, TypedEmbeddings, sequence_positions
from blazr.models.layers.dense_attention import RotarySelfAttention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.module import Module
from blazr.models.layers.norm import LayerNorm
from blazr.models.layers.rope import device_rope, rope_type, theta_and_scaling

# the hub's activation_function / transformers' hidden_act -> the gate's activation
ACTIVATIONS = {"swiglu": "silu", "silu": "silu", "geglu": "gelu", "gelu": "gelu"}
# hub options with the one value that runs, and what each means when it differs
FIXED_OPTIONS = {
    "qkv_proj_bias": (False, "q/k/v biases"),
    "mlp_fc1_bias": (False, "fc11/fc12 biases"),
    "mlp_fc2_bias": (False, "an fc2 bias"),
    "prenorm": (False, "pre-norm blocks"),
    "parallel_block": (False, "parallel attention and MLP"),
    "causal": (False, "causal attention"),
    "use_rms_norm": (False, "RMSNorm"),
    "rotary_emb_interleaved": (False, "interleaved (GPT-J) rotary pairs"),
    "rotary_emb_fraction": (1.0, "partial rotary"),
    "rotary_emb_scale_base": (None, "xPos rotary scaling"),
    "rotary_scaling_factor": (None, "dynamic-NTK rotary scaling"),
}


def task(config: dict[str, Any]) -> str:  # blazr.models.model_task
    return "embed"


@dataclass
class ModelArgs(BaseModelArgs):
    ALIASES: ClassVar[dict[str, str]] = {
        "n_embd": "hidden_size",
        "n_head": "num_attention_heads",
        "n_layer": "num_hidden_layers",
        "n_inner": "intermediate_size",
        "n_positions": "max_position_embeddings",
        "layer_norm_epsilon": "layer_norm_eps",
        "activation_function": "hidden_act",
        "rotary_emb_base": "rope_theta",
    }

    model_type: str = "nomic_bert"
    architectures: list[str] = field(default_factory=lambda: ["NomicBertModel"])
    vocab_size: int = 30528
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    rope_theta: float = 1000.0  # transformers' default_theta for nomic_bert
    rope_parameters: dict[str, Any] | None = None  # transformers v5
    rope_scaling: dict[str, Any] | None = None  # none runs here (Model reads it for GTE's)
    head_dim: int | None = None
    hub_options: dict[str, Any] = field(default_factory=dict)  # FIXED_OPTIONS as the config gives them

    @classmethod
    def from_dict(cls, config):
        return super().from_dict(
            dict(config, hub_options={k: config[k] for k in FIXED_OPTIONS if k in config})
        )

    def __post_init__(self):
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedError(f"NomicBERT activation {self.hidden_act!r} is not supported")
        for key, value in self.hub_options.items():
            want, meaning = FIXED_OPTIONS[key]
            if value != want:
                raise UnsupportedError(f"NomicBERT {key}={value!r} ({meaning}) is not supported")
        if self.head_dim not in (None, self.hidden_size // self.num_attention_heads):
            raise UnsupportedError(
                f"NomicBERT head_dim {self.head_dim} != hidden_size / heads is not supported"
            )
        self.rope_theta, scaling = theta_and_scaling(self.rope_theta, self.rope_scaling, self.rope_parameters)
        if scaling is not None:
            raise UnsupportedError(f"NomicBERT rope_type {rope_type(scaling)!r} is not supported")


class Model(EncoderModel):
    EMBED, LAYERS = "", "encoder.layers.{}."  # emb_ln sits beside "embeddings.", not inside it
    EMBED_TABLES, EMBED_NORM = "embeddings.", "emb_ln."  # relative to EMBED
    # names of the checkpoint's layers: (qkv, out) of the attention, (gate, up, down) of the MLP, and the block's
    # (attention, its norm, MLP, its norm) prefixes
    ATTENTION, MLP = ("Wqkv", "out_proj"), ("fc12", "fc11", "fc2")
    BLOCK = ("attn.", "norm1.", "mlp.", "norm2.")
    BIAS = False  # q/k/v, output and MLP-down biases (GTE has them)
    ACTIVATIONS = ACTIVATIONS  # hidden_act -> the gate's activation
    # the masked-LM head and a pooler do not run for embeddings
    UNUSED: tuple[str, ...] = ("cls.", "pooler.", "lm_head.")

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        a, dh = args, args.hidden_size // args.num_attention_heads
        self.embeddings = TypedEmbeddings(
            backend,
            a.vocab_size,
            a.hidden_size,
            a.type_vocab_size,
            a.layer_norm_eps,
            self.EMBED_TABLES,
            self.EMBED_NORM,
        )
        # one inv_freq array for every layer: the backends reuse its cos/sin table
        self.inv_freq = device_rope(backend, dh, a.rope_theta, a.rope_scaling, a.max_position_embeddings)[0]
        self.layers = [self._block(i) for i in range(a.num_hidden_layers)]  # inv_freq: (Dh/2,)

    def _block(self, i: int) -> Module:
        a, be, d = self.args, self.be, self.args.hidden_size
        attn = RotarySelfAttention(
            be, d, a.num_attention_heads, i, self.inv_freq, self.BIAS, names=self.ATTENTION
        )
        act = self.ACTIVATIONS[a.hidden_act]
        mlp = GatedMLP(be, d, a.intermediate_size, act, i, names=self.MLP, down_bias=self.BIAS)
        norm = lambda: LayerNorm(be, d, a.layer_norm_eps)  # noqa: E731
        return PostNormEncoderBlock(i, attn, norm(), mlp, norm(), self.BLOCK)

    def attention_args(self, seq_lens: np.ndarray) -> dict[str, Any]:
        return {"positions": self.be.upload(sequence_positions(seq_lens))}  # (T,) restarting at 0

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # nomic's own *For* classes nest the encoder under "bert."
        out = {(k[len("bert.") :] if k.startswith("bert.") else k): v for k, v in weights.items()}
        return {k: v for k, v in out.items() if not k.startswith(self.UNUSED)}


# ---- GGUF: llama.cpp's "nomic-bert" architecture (its conversion/bert.py NomicBertModel writes it) -----------

GGUF_TENSOR_NAMES = {
    "token_embd": "embeddings.word_embeddings",
    "token_types": "embeddings.token_type_embeddings",
    "token_embd_norm": "emb_ln",
    "blk.{N}.attn_qkv": "encoder.layers.{N}.attn.Wqkv",
    "blk.{N}.attn_output": "encoder.layers.{N}.attn.out_proj",
    "blk.{N}.attn_output_norm": "encoder.layers.{N}.norm1",
    "blk.{N}.ffn_up": "encoder.layers.{N}.mlp.fc11",
    "blk.{N}.ffn_gate": "encoder.layers.{N}.mlp.fc12",
    "blk.{N}.ffn_down": "encoder.layers.{N}.mlp.fc2",
    "blk.{N}.layer_output_norm": "encoder.layers.{N}.norm2",
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # q/k rows are as in HF (llama.cpp rotates them neox-style)
GGUF_CONFIG_READS_TENSORS = True  # the token-type count is told by token_types.weight


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's reading of a nomic-bert file (src/models/nomic-bert.cpp): the rope base from rope.freq_base,
    LayerNorm eps from attention.layer_norm_epsilon, SwiGLU, the position limit from context_length (the
    converter writes 2048 for nomic-embed-text's 8192-position config: the length it was trained on)."""
    return config | {
        "model_type": "nomic_bert",
        "architectures": ["NomicBertModel"],
        "layer_norm_eps": float(get("attention.layer_norm_epsilon")),
        "rope_theta": float(get("rope.freq_base", 1000.0)),
        "type_vocab_size": shapes["token_types.weight"][0] if "token_types.weight" in shapes else 0,
        "hidden_act": "silu",
    }
