"""CLAP (transformers' ClapModel, model_type clap): text and sound in one embedding space.

Two towers and two projections, as the checkpoint names them:

* `text_model.`: RoBERTa (blazr.models.roberta) and BERT's pooler (`pooler.dense` + tanh over <s>), then
  `text_projection` (linear1 -> ReLU -> linear2);
* `audio_model.audio_encoder.`: HTSAT over the log-mel (blazr.models.clap_audio), then `audio_projection`;
* `logit_scale_a`, `logit_scale_t`: log temperatures. logits_per_audio = e^logit_scale_a * cos(audio, text).

Both embeddings are L2-normalised, as get_audio_features / get_text_features return them. Saved buffers that
the network derives (position ids, token type ids, relative position indices, the batch norm's step count) are
dropped by sanitize().
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models import roberta
from blazr.models.base import Array, BaseModelArgs, check_weights, host_array, weight_uploader
from blazr.models.clap_audio import AudioArgs, AudioEncoder
from blazr.models.layers.module import Module, Weight, weight

DERIVED = (
    "text_model.embeddings.position_ids",
    "text_model.embeddings.token_type_ids",
    "relative_position_index",
    "num_batches_tracked",
)
PROJECTION_ACTS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "tanh": "tanh"}


def task(config: dict[str, Any]) -> str:
    return "review"  # blazr sound-review: ranks sounds against texts, not a generator or embedder served


@dataclass
class ModelArgs(BaseModelArgs):
    model_type: str = "clap"
    text_config: dict[str, Any] = field(default_factory=dict)
    audio_config: dict[str, Any] = field(default_factory=dict)
    projection_dim: int = 512
    projection_hidden_act: str = "relu"

    def __post_init__(self):
        if self.projection_hidden_act not in PROJECTION_ACTS:
            raise UnsupportedError(
                f"CLAP projection_hidden_act {self.projection_hidden_act!r} is not supported"
            )

    @property
    def text(self) -> roberta.ModelArgs:
        return roberta.ModelArgs.from_dict(
            {**self.text_config, "model_type": "roberta", "architectures": ["RobertaModel"]}
        )

    @property
    def audio(self) -> AudioArgs:
        return AudioArgs.from_dict(self.audio_config)


class Linear(Module):
    """act(x @ w.T + b), act None for none."""

    OPS = ("matmul", "binary", "act")

    def __init__(self, backend, n_in: int, n_out: int, act: str | None = None):
        self.be, self.n_in, self.n_out, self.act = backend, n_in, n_out, act
        self.weight = self.bias = None  # (out, in), (out,)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.n_out, self.n_in))
        yield weight("bias", "bias", (self.n_out,))

    def __call__(self, x: Array) -> Array:
        y = self.be.binary("add", self.be.matmul(x, self.weight), self.bias)  # (B, out)
        return y if self.act is None else self.be.act(y, self.act)


class Projection(Module):
    """ClapProjectionLayer: linear1 -> act -> linear2, into the shared space."""

    def __init__(self, backend, hidden: int, dim: int, act: str):
        self.linear1, self.linear2 = Linear(backend, hidden, dim, act), Linear(backend, dim, dim)

    def children(self) -> dict[str, Module]:
        return {"linear1.": self.linear1, "linear2.": self.linear2}

    def __call__(self, x: Array) -> Array:
        return self.linear2(self.linear1(x))  # (B, P)


class Model(Module):
    def __init__(self, args: ModelArgs, backend):
        self.args, self.be = args, backend
        text, audio, p = args.text, args.audio, args.projection_dim
        act = PROJECTION_ACTS[args.projection_hidden_act]
        self.text_model = roberta.Model(text, backend)
        self.pooler = Linear(backend, text.hidden_size, text.hidden_size, "tanh")
        self.text_projection = Projection(backend, text.hidden_size, p, act)
        self.audio_encoder = AudioEncoder(audio, backend)
        self.audio_projection = Projection(backend, audio.hidden_size, p, act)
        self.scales = np.ones(2)  # e^logit_scale_a, e^logit_scale_t

    def declare(self) -> Iterator[Weight]:
        yield weight("logit_scale_a", "logit_scale_a", ())
        yield weight("logit_scale_t", "logit_scale_t", ())

    def children(self) -> dict[str, Module]:
        return {
            "text_model.": self.text_model,
            "text_model.pooler.dense.": self.pooler,
            "text_projection.": self.text_projection,
            "audio_model.audio_encoder.": self.audio_encoder,
            "audio_projection.": self.audio_projection,
        }

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        return [(op, "f32", None) for op in sorted(self.ops())]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in weights.items() if not k.endswith(DERIVED)}

    def load_weights(self, weights: dict[str, Any], source: Path | str | None = None) -> None:
        """Strict: every tensor of weight_shapes() with its shape and nothing else, else CheckpointError."""
        check_weights(weights, self.weight_shapes(), source)
        upload = weight_uploader(self.be, "f32")
        for child_prefix, child in self.children().items():
            child.load(weights.__getitem__, upload, child_prefix)
        scale = lambda name: float(np.exp(host_array(weights[name]).astype(np.float64)))  # noqa: E731
        self.scales = np.array([scale("logit_scale_a"), scale("logit_scale_t")])

    # ---- running -------------------------------------------------------------------------------------------

    def embed_text(self, ids: list[list[int]]) -> np.ndarray:
        """Token ids of B texts (each with its <s> ... </s>) -> (B, P) unit vectors."""
        lens = np.array([len(x) for x in ids], dtype=np.int32)  # (B,)
        hidden = self.text_model.encode(np.concatenate(ids).astype(np.int32), lens)  # (T, D)
        first = self.be.upload((np.cumsum(lens) - lens).astype(np.int32))  # (B,) each text's <s> row
        pooled = self.pooler(self.be.embed(hidden, first))  # (B, D)
        return _unit(self.be.download(self.text_projection(pooled)))

    def embed_audio(self, mel: np.ndarray) -> np.ndarray:
        """Log-mel features (frames, mels) of one clip -> (P,) unit vector."""
        return _unit(self.be.download(self.audio_projection(self.audio_encoder(mel))))[0]

    def logits_per_audio(self, audio: np.ndarray, text: np.ndarray) -> np.ndarray:
        """(A, P) and (T, P) unit embeddings -> (A, T) scaled cosine similarities, as ClapModel gives them."""
        return self.scales[0] * (audio.astype(np.float64) @ text.astype(np.float64).T)


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 length (B, P)."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)
