"""sentence-transformers' pipeline of a model directory: what turns token states into a sentence vector.

A sentence-transformers model lists its modules in modules.json: the Transformer (its max_seq_length in
sentence_bert_config.json), a Pooling (1_Pooling/config.json: CLS, mean, max, mean / sqrt(len), weighted mean,
last token; several modes are concatenated in that order), optional Dense layers (N_Dense/config.json and
model.safetensors: linear.weight, linear.bias, an activation) and Normalize. config_sentence_transformers.json
holds named prompts (query / passage). A directory without modules.json (a plain encoder) gets what
sentence-transformers makes for it: mean pooling, no normalisation. A GGUF file without a modules.json beside
it gets llama.cpp's pipeline: the pooling its converter wrote ({arch}.pooling_type) and L2 normalisation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, UnsupportedError

MODULE = "sentence_transformers.models."
# Pooling config keys in the order sentence-transformers concatenates them
POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# torch activation class names of a Dense module -> numpy functions
DENSE_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.Tanh": np.tanh,
    "torch.nn.modules.activation.ReLU": lambda x: np.maximum(x, 0),
    "torch.nn.modules.activation.Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}
# llama.cpp's llama_pooling_type values ({arch}.pooling_type) -> pooling modes; 4 (RANK) is a reranker's, whose
# scores need no pooling mode, and 0 (NONE, per-token vectors) has no sentence vector: mean, as for a plain model
GGUF_POOLING = {0: "mean", 1: "mean", 2: "cls", 3: "lasttoken", 4: "cls"}


@dataclass
class Dense:
    """y = act(x @ weight.T + bias): weight (out, in), bias (out,) or None."""

    weight: np.ndarray
    bias: np.ndarray | None
    activation: str

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight.T  # (N, out)
        if self.bias is not None:
            y += self.bias
        return DENSE_ACTIVATIONS[self.activation](y).astype(np.float32)


@dataclass
class SentenceModules:
    """Everything after the encoder, and the limits and prompts around it."""

    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True  # False: prompt tokens are left out of the pooling (instruction embedders)
    dense: list[Dense] = field(default_factory=list)
    normalize: bool = False
    max_seq_length: int | None = None  # None: the model's own limit
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    source: str = ""  # the directory, for messages


def read_sentence_modules(directory: Path, gguf_metadata: dict[str, Any] | None = None) -> SentenceModules:
    """The pipeline a sentence-transformers directory describes (defaults where a file is absent); for a GGUF
    checkpoint (its `gguf_metadata`) in a directory without modules.json, the pipeline the GGUF says."""
    directory = Path(directory)
    out = SentenceModules(source=str(directory))
    st_config = _json(directory / "config_sentence_transformers.json") or {}
    # sentence-transformers always knows "query" and "document" (empty unless the model gives them)
    out.prompts = {"query": "", "document": ""} | {
        str(k): str(v) for k, v in (st_config.get("prompts") or {}).items()
    }
    out.default_prompt_name = st_config.get("default_prompt_name")
    modules = _json(directory / "modules.json")
    if modules is None and gguf_metadata is not None:
        return _gguf_pipeline(out, gguf_metadata)
    if modules is None:
        out.max_seq_length = _max_seq_length(directory)
        return out
    for entry in modules:
        kind = str(entry.get("type", ""))
        path = directory / str(entry.get("path", ""))
        if kind == MODULE + "Transformer":
            out.max_seq_length = _max_seq_length(path)
        elif kind == MODULE + "Pooling":
            out.pooling, out.include_prompt = _pooling(path)
        elif kind == MODULE + "Dense":
            out.dense.append(_dense(path))
        elif kind == MODULE + "Normalize":
            out.normalize = True
        else:
            raise UnsupportedError(
                f"{directory / 'modules.json'}: sentence-transformers module {kind!r} is not supported "
                "(Transformer, Pooling, Dense and Normalize are)"
            )
    return out


def _gguf_pipeline(out: SentenceModules, meta: dict[str, Any]) -> SentenceModules:
    """llama.cpp's embedding pipeline of a GGUF: the pooling type its converter took from the model's Pooling
    module (mean when the file has none, as sentence-transformers pools a plain encoder), then L2 normalisation
    (llama.cpp's default, --embd-normalize 2). The longest input is the model's (context_length)."""
    arch = meta.get("general.architecture", "")
    kind = meta.get(f"{arch}.pooling_type", 1)
    if kind not in GGUF_POOLING:
        raise UnsupportedError(f"{out.source}: GGUF {arch}.pooling_type {kind} is not one llama.cpp defines")
    out.pooling, out.normalize = (GGUF_POOLING[kind],), True
    return out


def _json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None


def _max_seq_length(path: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's model_max_length when it is a real
    limit (sentence-transformers takes the smaller of that and the model's positions, as the caller does)."""
    own = (_json(path / "sentence_bert_config.json") or {}).get("max_seq_length")
    if own:
        return int(own)
    tokenizer_limit = (_json(path / "tokenizer_config.json") or {}).get("model_max_length")
    return int(tokenizer_limit) if isinstance(tokenizer_limit, int) and tokenizer_limit < 1 << 20 else None


def _pooling(path: Path) -> tuple[tuple[str, ...], bool]:
    config = _json(path / "config.json")
    if config is None:
        raise CheckpointError(f"{path / 'config.json'}: missing (the Pooling module's settings)")
    if "pooling_mode" in config:  # newer configs may name one mode
        mode = {"mean": "mean", "cls": "cls", "max": "max", "lasttoken": "lasttoken"}.get(
            config["pooling_mode"]
        )
        modes = (mode,) if mode else ()
    else:
        modes = tuple(name for key, name in POOLING_MODES.items() if config.get(key))
    if not modes:
        raise UnsupportedError(f"{path / 'config.json'}: no pooling mode this runtime knows is switched on")
    return modes, bool(config.get("include_prompt", True))


def _dense(path: Path) -> Dense:
    from blazr.loaders.safetensors import read_safetensors_file

    config = _json(path / "config.json") or {}
    activation = str(config.get("activation_function", "torch.nn.modules.linear.Identity"))
    if activation not in DENSE_ACTIVATIONS:
        raise UnsupportedError(f"{path / 'config.json'}: Dense activation {activation!r} is not supported")
    weights_file = path / "model.safetensors"
    if not weights_file.is_file():
        raise CheckpointError(
            f"{path}: the Dense module's weights must be in model.safetensors (pytorch_model.bin is not read)"
        )
    tensors = read_safetensors_file(weights_file)
    if "linear.weight" not in tensors:
        raise CheckpointError(f"{weights_file}: no tensor 'linear.weight'")
    weight = tensors["linear.weight"].load().astype(np.float32)  # (out, in)
    bias = tensors["linear.bias"].load().astype(np.float32) if "linear.bias" in tensors else None
    return Dense(weight, bias, activation)


def pool(hidden: np.ndarray, seq_lens: np.ndarray, modes: tuple[str, ...], skip: np.ndarray) -> np.ndarray:
    """Sentence vectors (B, len(modes) * D) from hidden (T, D) of sequences of seq_lens (B,) tokens back to back;
    skip (B,) leading tokens of each (a prompt left out of the pooling) are not pooled, except by CLS and
    last-token pooling, which read one token whatever the mask."""
    ends = np.cumsum(seq_lens)  # (B,)
    starts = ends - seq_lens  # (B,)
    parts = []
    for mode in modes:
        rows = []
        for b in range(len(seq_lens)):
            h = hidden[starts[b] + skip[b] : ends[b]].astype(np.float64)  # (n, D) the pooled tokens
            if mode == "cls":
                rows.append(hidden[starts[b]])
            elif mode == "lasttoken":
                rows.append(hidden[ends[b] - 1])
            elif mode == "max":
                rows.append(h.max(axis=0))
            elif mode == "mean":
                rows.append(h.mean(axis=0))
            elif mode == "mean_sqrt_len":
                rows.append(h.sum(axis=0) / np.sqrt(len(h)))
            elif mode == "weightedmean":  # weights 1..n by position, as sentence-transformers does
                w = np.arange(skip[b] + 1, skip[b] + len(h) + 1, dtype=np.float64)  # (n,)
                rows.append((w @ h) / w.sum())
        parts.append(np.stack(rows))
    return np.concatenate(parts, axis=1).astype(np.float32)
