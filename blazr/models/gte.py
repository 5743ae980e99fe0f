"""GTE v1.5 / multilingual (Alibaba's "new" architecture: model_type new, NewModel; transformers' GteModel):
gte-base-en-v1.5, gte-large-en-v1.5, gte-multilingual-base, and gte-multilingual-reranker-base
(NewForSequenceClassification / GteForSequenceClassification).

NomicBERT's network with biases and other names: word (+ token type) embeddings, then `embeddings.LayerNorm`;
post-norm blocks `encoder.layer.N.`: x = attn_ln(x + attn(x)), x = mlp_ln(x + mlp(x)). Attention: one fused
`attention.qkv_proj` (3D, D) with a bias, rotary q/k (neox halves over the whole head, positions restarting
at 0 in each sequence), `attention.o_proj` with a bias. The MLP: `mlp.up_gate_proj` (2F, D, no bias) holds the
up rows then the gate rows, down_proj(up(x) * act(gate(x))) with a bias on down_proj. A reranker adds BERT's
pooler (dense + tanh over the first token) and `classifier`, the encoder under "new." (transformers: "gte.").

The hub's config gives rope_theta and rope_scaling {"type": "ntk", "factor": f}: Alibaba's fixed-NTK rotary,
built once for max_position_embeddings * f positions, is a base of rope_theta * f with every frequency then
divided by f ** (2 / head_dim), i.e. transformers' "linear" rope of factor f ** (2 / head_dim) on that base,
which is how it runs here. transformers' own config spelling (rope_parameters) is read too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models import nomic_bert
from blazr.models.base import HF_ACTIVATIONS, BaseModelArgs, host_array
from blazr.models.bert import ClassificationHead
from blazr.models.encoder import classifier_task
from blazr.models.layers.rope import rope_type, theta_and_scaling

CLASSIFIERS = ("NewForSequenceClassification", "GteForSequenceClassification")
ACTIVATIONS = HF_ACTIVATIONS | {"gelu_new": "gelu_tanh"}


task = classifier_task(CLASSIFIERS)  # blazr.models.model_task


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "gte"
    architectures: list[str] = field(default_factory=lambda: ["GteModel"])
    vocab_size: int = 250048
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "gelu"
    max_position_embeddings: int = 8192
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-12
    rope_theta: float = 160_000.0  # transformers' default_theta for gte
    rope_scaling: dict[str, Any] | None = None  # the hub's: {"type": "ntk", "factor": f}
    rope_parameters: dict[str, Any] | None = None  # transformers v5
    # the hub's options that would change the network; only these values run
    position_embedding_type: str = "rope"
    layer_norm_type: str = "layer_norm"
    logn_attention_scale: bool = False
    pack_qkv: bool = True
    num_labels: int | None = None  # (optional) classifiers: else len(id2label)
    id2label: dict[str, str] | None = None

    def __post_init__(self):
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedError(f"GTE hidden_act {self.hidden_act!r} is not supported")
        for key, want in (
            ("position_embedding_type", "rope"),
            ("layer_norm_type", "layer_norm"),
            ("logn_attention_scale", False),
            ("pack_qkv", True),
        ):
            if getattr(self, key) != want:
                raise UnsupportedError(
                    f"GTE {key}={getattr(self, key)!r} is not supported (only {want!r} runs)"
                )
        if self.rope_parameters:
            self.rope_theta, self.rope_scaling = theta_and_scaling(
                self.rope_theta, None, self.rope_parameters
            )
        elif self.rope_scaling:
            self.rope_theta, self.rope_scaling = self.hub_rope(self.rope_scaling)
        if rope_type(self.rope_scaling) not in ("default", "linear"):
            raise UnsupportedError(f"GTE rope_type {rope_type(self.rope_scaling)!r} is not supported")
        if self.num_labels is None:
            self.num_labels = len(self.id2label) if self.id2label else 2

    def hub_rope(self, scaling: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """(theta, transformers-style scaling) of the hub's rope_scaling (see the module docstring)."""
        kind, factor = scaling.get("type") or scaling.get("rope_type"), float(scaling.get("factor", 1.0))
        if kind != "ntk" or scaling.get("mixed_b") is not None:
            raise UnsupportedError(f"GTE rope_scaling {scaling!r} is not supported (only fixed 'ntk' runs)")
        dh = self.hidden_size // self.num_attention_heads
        return self.rope_theta * factor, {"rope_type": "linear", "factor": factor ** (2 / dh)}

    @property
    def is_classifier(self) -> bool:
        return bool(self.architectures) and self.architectures[0] in CLASSIFIERS


class Model(nomic_bert.Model):
    EMBED, LAYERS = "embeddings.", "encoder.layer.{}."
    EMBED_TABLES, EMBED_NORM = "", "LayerNorm."
    ATTENTION, MLP = ("qkv_proj", "o_proj"), ("gate_proj", "up_proj", "down_proj")
    BLOCK = ("attention.", "attn_ln.", "mlp.", "mlp_ln.")
    BIAS = True
    ACTIVATIONS = ACTIVATIONS
    UNUSED = ("embeddings.position_ids", "lm_head.")
    # where the *For* checkpoints nest the encoder: the hub's "new.", and what transformers 5.24's save_pretrained
    # writes for GteForSequenceClassification ("new.gte." before the encoder, "new." before the classifier)
    PREFIXES = ("new.", "gte.")

    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        super().__init__(args, backend, dtype)
        if args.is_classifier:
            self.head = ClassificationHead(backend, args.hidden_size, args.num_labels)

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in weights.items():
            while name.startswith(self.PREFIXES):
                name = name.split(".", 1)[1]
            if name.startswith(self.UNUSED) or (self.head is None and name.startswith("pooler.")):
                continue
            if name.endswith("mlp.up_gate_proj.weight"):  # (2F, D): up rows, then gate rows
                up_gate, prefix = host_array(value), name[: -len("up_gate_proj.weight")]
                half = up_gate.shape[0] // 2
                out[prefix + "up_proj.weight"] = np.ascontiguousarray(up_gate[:half])  # (F, D)
                out[prefix + "gate_proj.weight"] = np.ascontiguousarray(up_gate[half:])  # (F, D)
                continue
            out[name] = value
        return out
