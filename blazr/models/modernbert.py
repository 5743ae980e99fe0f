"""ModernBERT (HF ModernBertModel, model_type modernbert) and ModernBertForSequenceClassification.

Embeddings: `embeddings.tok_embeddings` then `embeddings.norm`; no position table, rotary positions instead.
Pre-norm blocks `layers.N.`: x += attn(attn_norm(x)), x += mlp(mlp_norm(x)); the first block has no attn_norm
(HF's Identity: the embeddings are already normed). Attention: one fused `attn.Wqkv` (3D, D), q/k rotated
(neox halves over the whole head, positions restarting at 0 in each sequence), `attn.Wo`. Every
`global_attn_every_n_layers`-th layer (from layer 0) attends to the whole sequence with the global rope base;
the others see keys within local_attention // 2 on either side, with the local base. The MLP is GeGLU:
`mlp.Wi` (2F, D) holds the activated input rows then the gate rows, act(input) * gate -> `mlp.Wo`.
`final_norm` ends the model. LayerNorms and linears have no biases unless norm_bias / attention_bias /
mlp_bias say so. A classifier pools (the first token, or the mean) -> `head.dense` -> act -> `head.norm` ->
`classifier`, the encoder under "model.".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, Array, BaseModelArgs, trace
from blazr.models.encoder import EncoderModel, classifier_task, sequence_positions
from blazr.models.layers.dense_attention import RotarySelfAttention
from blazr.models.layers.mlp import GatedMLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm
from blazr.models.layers.rope import device_rope, theta_and_scaling

ACTIVATIONS = HF_ACTIVATIONS | {"gelu_new": "gelu_tanh"}
CLASSIFIERS = ("ModernBertForSequenceClassification",)
KINDS = ("full_attention", "sliding_attention")  # HF's layer_types


task = classifier_task(CLASSIFIERS)  # blazr.models.model_task


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "modernbert"
    architectures: list[str] = field(default_factory=lambda: ["ModernBertModel"])
    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    norm_eps: float = 1e-5
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    global_attn_every_n_layers: int = 3
    layer_types: list[str] | None = None  # transformers v5 configs: one of KINDS per layer
    local_attention: int = 128
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    rope_parameters: dict[str, Any] | None = None  # transformers v5: {kind: {"rope_theta": ..., ...}}
    classifier_pooling: str = "cls"
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    num_labels: int | None = None  # (optional) classifiers: else len(id2label)
    id2label: dict[str, str] | None = None

    def __post_init__(self):
        for act in (self.hidden_activation, self.classifier_activation):
            if act not in ACTIVATIONS:
                raise UnsupportedError(f"ModernBERT activation {act!r} is not supported")
        if self.classifier_pooling not in ("cls", "mean"):
            raise UnsupportedError(
                f"ModernBERT classifier_pooling {self.classifier_pooling!r} is not supported"
            )
        if self.layer_types is None:  # HF's default: layer 0 global, then every n-th
            n = self.global_attn_every_n_layers
            self.layer_types = [KINDS[bool(i % n)] for i in range(self.num_hidden_layers)]
        if self.num_labels is None:
            self.num_labels = len(self.id2label) if self.id2label else 2

    def rope(self, kind: str) -> tuple[float, dict[str, Any] | None]:
        """(theta, scaling) of the rotary embedding of `kind` layers."""
        theta = self.global_rope_theta if kind == "full_attention" else self.local_rope_theta
        return theta_and_scaling(theta, None, (self.rope_parameters or {}).get(kind))

    @property
    def is_classifier(self) -> bool:
        return bool(self.architectures) and self.architectures[0] in CLASSIFIERS


class Embeddings(Module):
    OPS = ("embed",)

    def __init__(self, backend, vocab: int, dim: int, eps: float, bias: bool):
        self.be, self.vocab, self.dim = backend, vocab, dim
        self.norm = LayerNorm(backend, dim, eps, bias)
        self.tok = None  # (V, D)

    def declare(self) -> Iterator[Weight]:
        yield weight("tok", "tok_embeddings.weight", (self.vocab, self.dim))

    def children(self) -> dict[str, Module]:
        return {"norm.": self.norm}

    def __call__(self, ids: Array) -> Array:
        return self.norm(self.be.embed(self.tok, ids))  # (T, D)


class PreNormBlock(Module):
    """x += attn(attn_norm(x)); x += mlp(mlp_norm(x)); attn_norm None: the first layer's Identity."""

    OPS = ("binary",)

    def __init__(
        self, layer: int, attn: RotarySelfAttention, attn_norm: Module | None, mlp: Module, mlp_norm
    ):
        self.layer, self.attn, self.attn_norm, self.mlp, self.mlp_norm = layer, attn, attn_norm, mlp, mlp_norm

    def children(self) -> dict[str, Module]:
        out = {"attn.": self.attn, "mlp_norm.": self.mlp_norm, "mlp.": self.mlp}
        return out if self.attn_norm is None else out | {"attn_norm.": self.attn_norm}

    def __call__(self, x: Array, seq_lens: Array, positions: Array) -> Array:
        be = self.attn.be
        h = x if self.attn_norm is None else self.attn_norm(x)  # (T, D)
        x = be.binary("add", x, self.attn(h, seq_lens, positions))  # (T, D)
        trace("attn_out", self.layer, x)
        x = be.binary("add", x, self.mlp(self.mlp_norm(x)))  # (T, D)
        trace("l_out", self.layer, x)
        return x


class ClassificationHead(Module):
    """pooled (B, D) -> norm(act(dense)) -> classifier (B, num_labels) (ModernBertForSequenceClassification)."""

    OPS = ("matmul", "binary", "act")

    def __init__(self, backend, args: ModelArgs):
        a = args
        self.be, self.dim, self.labels, self.bias = backend, a.hidden_size, a.num_labels, a.classifier_bias
        self.act = ACTIVATIONS[a.classifier_activation]
        self.norm = LayerNorm(backend, a.hidden_size, a.norm_eps, a.norm_bias)
        self.dense = self.dense_bias = self.classifier = self.classifier_bias = None

    def declare(self) -> Iterator[Weight]:
        d, n = self.dim, self.labels
        yield weight("dense", "head.dense.weight", (d, d))  # (D, D)
        if self.bias:
            yield weight("dense_bias", "head.dense.bias", (d,))
        yield weight("classifier", "classifier.weight", (n, d))  # (labels, D)
        yield weight("classifier_bias", "classifier.bias", (n,))

    def children(self) -> dict[str, Module]:
        return {"head.norm.": self.norm}

    def __call__(self, pooled: Array) -> Array:
        be = self.be
        h = be.matmul(pooled, self.dense)  # (B, D)
        if self.dense_bias is not None:
            h = be.binary("add", h, self.dense_bias)
        h = self.norm(be.act(h, self.act))  # (B, D)
        return be.binary("add", be.matmul(h, self.classifier), self.classifier_bias)  # (B, labels)


class Model(EncoderModel):
    EMBED, LAYERS = "embeddings.", "layers.{}."

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        a, dh = args, args.hidden_size // args.num_attention_heads
        if len(a.layer_types) != a.num_hidden_layers or set(a.layer_types) - set(KINDS):
            raise UnsupportedError(
                f"ModernBERT layer_types {a.layer_types!r} are not one of {KINDS} per layer"
            )
        self.embeddings = Embeddings(backend, a.vocab_size, a.hidden_size, a.norm_eps, a.norm_bias)
        # the same inv_freq array for every layer of a kind: the backends reuse its cos/sin table
        self.inv_freq = {k: device_rope(backend, dh, *a.rope(k), a.max_position_embeddings)[0] for k in KINDS}
        self.layers = [self._block(i) for i in range(a.num_hidden_layers)]
        self.final_norm = LayerNorm(backend, a.hidden_size, a.norm_eps, a.norm_bias)
        self.head = ClassificationHead(backend, a) if a.is_classifier else None

    def _block(self, i: int) -> Module:
        a, be = self.args, self.be
        kind = a.layer_types[i]
        # HF's bidirectional sliding mask keeps |q - k| <= local_attention // 2; attention_dense keeps < window
        window = a.local_attention // 2 + 1 if kind == "sliding_attention" else 0
        attn = RotarySelfAttention(
            be, a.hidden_size, a.num_attention_heads, i, self.inv_freq[kind], a.attention_bias, window
        )
        act = ACTIVATIONS[a.hidden_activation]
        mlp = GatedMLP(be, a.hidden_size, a.intermediate_size, act, i, a.mlp_bias, "Wi", ("", "", "Wo"))
        norm = lambda: LayerNorm(be, a.hidden_size, a.norm_eps, a.norm_bias)  # noqa: E731
        return PreNormBlock(i, attn, None if i == 0 else norm(), mlp, norm())

    def children(self) -> dict[str, Module]:
        return super().children() | {"final_norm.": self.final_norm}

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        # *For* checkpoints nest the encoder under "model."; the masked-LM head (head., decoder.) does not run
        out = {(k[len("model.") :] if k.startswith("model.") else k): v for k, v in weights.items()}
        drop = ("decoder.",) + (() if self.head is not None else ("head.",))
        return {k: v for k, v in out.items() if not k.startswith(drop)}

    def encode(self, ids: np.ndarray, seq_lens: np.ndarray, type_ids: np.ndarray | None = None) -> Array:
        """Final hidden states (T, D) of ids (T,) holding sequences of seq_lens (B,) back to back (no segments)."""
        be = self.be
        positions = be.upload(sequence_positions(seq_lens))  # (T,) restarting at 0
        x = self.embeddings(be.upload(np.asarray(ids, dtype=np.int32)))  # (T, D)
        trace("embed", -1, x)
        lens = be.upload(np.asarray(seq_lens, dtype=np.int32))  # (B,)
        for layer in self.layers:
            x = layer(x, lens, positions)
        return self.final_norm(x)  # (T, D)

    def classify(self, hidden: Array, seq_lens: np.ndarray) -> np.ndarray:
        """(B, num_labels): the head over each sequence's first token, or its mean (classifier_pooling)."""
        if self.args.classifier_pooling == "cls" or self.head is None:
            return super().classify(hidden, seq_lens)
        h = np.asarray(self.be.download(hidden), dtype=np.float32)  # (T, D)
        ends = np.cumsum(seq_lens)  # (B,)
        means = np.stack([h[e - n : e].mean(0) for e, n in zip(ends, seq_lens, strict=True)])  # (B, D)
        return self.be.download(self.head(self.be.upload(means)))


# ---- GGUF: llama.cpp's "modern-bert" architecture (its conversion/bert.py ModernBertModel writes it) ----------

GGUF_TENSOR_NAMES = {
    "token_embd": "embeddings.tok_embeddings",
    "token_embd_norm": "embeddings.norm",
    "output_norm": "final_norm",
    "blk.{N}.attn_norm": "layers.{N}.attn_norm",  # none in layer 0 (HF's Identity)
    "blk.{N}.attn_qkv": "layers.{N}.attn.Wqkv",
    "blk.{N}.attn_output": "layers.{N}.attn.Wo",
    "blk.{N}.ffn_norm": "layers.{N}.mlp_norm",
    "blk.{N}.ffn_up": "layers.{N}.mlp.Wi",  # (2F, D) as HF's: the activated rows, then the gate rows
    "blk.{N}.ffn_down": "layers.{N}.mlp.Wo",
    "cls": "head.dense",
    "cls.norm": "head.norm",
    "cls.output": "classifier",  # ModernBertForSequenceClassification's, renamed classifier.out_proj
}
GGUF_QK_PERMUTED: frozenset[str] = frozenset()  # q/k rows are as in HF (llama.cpp rotates them neox-style)
GGUF_CONFIG_READS_TENSORS = True  # biases and a classifier are told by the tensors the file has
# {arch}.classifier.pooling_type (llama_pooling_type) -> classifier_pooling
GGUF_POOLING = {1: "mean", 2: "cls"}


def gguf_config(arch: str, get, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """llama.cpp's reading of a modern-bert file (src/models/modern-bert.cpp): global / local rope bases from
    rope.freq_base / freq_base_swa, the window from attention.sliding_window (none: all layers global), every
    sliding_window_pattern-th layer global from layer 0 (or per-layer flags, true for local), the LayerNorm eps
    (written as layer_norm_rms_epsilon), the MLP's activation (GeGLU when absent). llama.cpp reads no bias;
    the converter writes those a checkpoint has, and blazr reads them. A cls.output tensor makes a reranker,
    pooling as classifier.pooling_type says (mean when absent, as llama.cpp defaults), its head GELU."""
    window, pattern = int(get("attention.sliding_window", 0) or 0), get("attention.sliding_window_pattern", 3)
    n = config["num_hidden_layers"]
    flags = pattern if isinstance(pattern, list) else [i % int(pattern) for i in range(n)]
    kinds = [KINDS[bool(window) and bool(flag)] for flag in flags]  # a local layer needs a window
    eps = get("attention.layer_norm_epsilon", None) or get("attention.layer_norm_rms_epsilon", 1e-5)
    out = config | {
        "model_type": "modernbert",
        "architectures": ["ModernBertModel"],
        "hidden_activation": str(get("hidden_activation", "gelu")),
        "norm_eps": float(eps),
        "layer_types": kinds,
        "local_attention": window,
        "global_rope_theta": float(get("rope.freq_base", 160_000.0)),
        "local_rope_theta": float(get("rope.freq_base_swa", 10_000.0)),
        "norm_bias": "token_embd_norm.bias" in shapes,
        "attention_bias": "blk.0.attn_qkv.bias" in shapes,
        "mlp_bias": "blk.0.ffn_up.bias" in shapes,
    }
    if "cls.output.weight" in shapes:
        labels = get("classifier.output_labels", None) or []
        out |= {
            "architectures": ["ModernBertForSequenceClassification"],
            "num_labels": shapes["cls.output.weight"][0],
            "id2label": {str(i): str(name) for i, name in enumerate(labels)} or None,
            "classifier_pooling": GGUF_POOLING.get(get("classifier.pooling_type", 1), "mean"),
            "classifier_bias": "cls.bias" in shapes,
        }
    return out
