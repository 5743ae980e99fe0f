"""Whisper checkpoints in the three layouts blazr reads, all returned as (config, weights) under Hugging Face
transformers' `WhisperForConditionalGeneration` names and config keys:

* a Hugging Face directory (config.json + *.safetensors),
* a CTranslate2 directory (model.bin + config.json, as faster-whisper ships them), converted here,
* a whisper.cpp ggml `.bin` file (blazr.loaders.whisper_ggml).

`read_whisper_checkpoint(path)` picks the layout from the files. Weights keep their stored float type
(float16 stays float16, float32 stays float32); int8 and ggml-quantized weights come back dequantized to
float32. The output projection is tied to `model.decoder.embed_tokens.weight` and never returned.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, ModelNotFoundError, UnsupportedError
from blazr.loaders.ctranslate2 import CT2Model, read_ct2

GGML_MAGIC = b"lmgg"  # 0x67676d6c ("ggml") written little-endian
# CTranslate2's Activation enum (include/ctranslate2/ops/activation.h) -> HF activation_function
_CT2_ACTIVATIONS = {0: "relu", 1: "gelu_new", 2: "silu", 3: "gelu", 4: "quick_gelu", 5: "tanh"}
# the CTranslate2 config.json's decoding options -> HF generation-config names (lang_ids has no HF twin)
_CT2_DECODING_KEYS = {
    "alignment_heads": "alignment_heads",  # [[decoder layer, head], ...]
    "suppress_ids": "suppress_tokens",
    "suppress_ids_begin": "begin_suppress_tokens",
    "lang_ids": "lang_ids",
}


def read_whisper_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(config, weights) of a Whisper model: an HF directory, a CTranslate2 directory (or its model.bin),
    or a whisper.cpp ggml file. CheckpointError names the file for a truncated or corrupt one;
    UnsupportedError says when the files are not a Whisper model."""
    path = Path(path)
    if not path.exists():
        raise ModelNotFoundError(f"{path}: no such file or directory")
    if path.is_file():
        with open(path, "rb") as f:
            head = f.read(4)
        if head == GGML_MAGIC:
            from blazr.loaders.whisper_ggml import whisper_from_ggml

            return whisper_from_ggml(path)
        if path.name == "model.bin":
            return whisper_from_ct2(path.parent)
        if path.suffix == ".safetensors":
            return whisper_from_hf(path.parent)
        raise UnsupportedError(
            f"{path}: not a Whisper checkpoint blazr reads (a ggml .bin, a CTranslate2 model.bin, or an HF "
            "directory with config.json and .safetensors)"
        )
    if (path / "model.bin").is_file():
        return whisper_from_ct2(path)
    if any(path.glob("*.safetensors")):
        return whisper_from_hf(path)
    raise UnsupportedError(f"{path}: holds neither a CTranslate2 model.bin nor .safetensors weights")


def whisper_format(path: str | Path) -> str | None:
    """ "ggml", "ctranslate2" or "safetensors" when `path` holds Whisper in a layout blazr reads, judged from
    headers and config.json without reading weights; else None (another kind of model, or nothing)."""
    path = Path(path)
    try:
        if path.is_file():
            with open(path, "rb") as f:
                if f.read(4) == GGML_MAGIC:
                    return "ggml"
            return "ctranslate2" if path.name == "model.bin" else None
        if (path / "model.bin").is_file():
            return "ctranslate2"
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return "safetensors" if isinstance(config, dict) and config.get("model_type") == "whisper" else None


# --- Hugging Face directory ------------------------------------------------------------------------------


def whisper_from_hf(directory: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from blazr.loaders.safetensors import read_config, read_safetensors_file, read_sharded

    directory = Path(directory)
    config = read_config(directory)
    if config.get("model_type") != "whisper":
        raise UnsupportedError(
            f"{directory / 'config.json'}: model_type is {config.get('model_type')!r}, not a Whisper model"
        )
    indexes = sorted(directory.glob("*.safetensors.index.json"))
    if indexes:
        tensors, _ = read_sharded(indexes[0])
    else:
        tensors = {}
        for file in sorted(directory.glob("*.safetensors")):
            tensors.update(read_safetensors_file(file))
    weights = {name: t.load() for name, t in tensors.items()}
    # transformers may save the tied output projection too; it is embed_tokens again
    proj = weights.pop("proj_out.weight", None)
    if proj is not None and not np.array_equal(proj, weights.get("model.decoder.embed_tokens.weight")):
        raise UnsupportedError(f"{directory}: proj_out.weight differs from embed_tokens (an untied Whisper)")
    check_complete(weights, config, directory)
    return config, weights


# --- CTranslate2 directory -------------------------------------------------------------------------------


def whisper_from_ct2(directory: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A faster-whisper style directory: model.bin (WhisperSpec) and config.json (alignment heads,
    suppressed ids, language ids). Weights are renamed to HF names and the fused projections split."""
    directory = Path(directory)
    model = read_ct2(directory / "model.bin")
    if model.spec != "WhisperSpec":
        raise UnsupportedError(
            f"{model.path}: CTranslate2 spec {model.spec or '(none)'!r} is not Whisper (WhisperSpec)"
        )
    weights = _ct2_weights(model)
    config = _ct2_config(model, weights, _read_ct2_json(directory / "config.json"))
    return config, weights


def _read_ct2_json(path: Path) -> dict[str, Any]:
    """The converter's config.json; optional (only decoding options live there, not shapes)."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: must hold a JSON object")
    return value


def _layer_count(names: Any, prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"/layer_(\d+)/")
    found = {int(m.group(1)) for n in names if (m := pattern.match(n))}
    return max(found) + 1 if found else 0


class _Taker:
    """Pops CT2 variables by name so that anything left over at the end is reported, not silently lost."""

    def __init__(self, model: CT2Model):
        self.path = model.path
        self.left = model.dequantized()
        for alias in model.aliases:  # aliases repeat a variable under another name (the tied projection)
            self.left.pop(alias, None)

    def __call__(self, name: str) -> np.ndarray:
        try:
            return self.left.pop(name)
        except KeyError:
            raise CheckpointError(f"{self.path}: Whisper variable {name} is missing") from None


def _ct2_weights(model: CT2Model) -> dict[str, np.ndarray]:
    take = _Taker(model)
    enc, dec = "model.encoder", "model.decoder"
    out: dict[str, np.ndarray] = {f"{dec}.embed_tokens.weight": take("decoder/embeddings/weight")}
    d = out[f"{dec}.embed_tokens.weight"].shape[1]  # (vocab, d)

    def norm(src: str, dst: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = take(f"{src}/gamma"), take(f"{src}/beta")

    def linear(src: str, dst: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = take(f"{src}/weight"), take(f"{src}/bias")

    def split(src: str, dst: str, parts: tuple[str, ...]) -> None:
        # fused rows: weight (len(parts) * d, d), bias (len(parts) * d,), in the order of `parts`
        weight, bias = take(f"{src}/weight"), take(f"{src}/bias")
        if weight.shape[0] != len(parts) * d:
            raise CheckpointError(
                f"{model.path}: {src}/weight has shape {weight.shape}, expected {len(parts)}*{d} rows"
            )
        for i, part in enumerate(parts):
            out[f"{dst}.{part}_proj.weight"] = weight[i * d : (i + 1) * d]
            # HF has no K bias; CTranslate2 stores zeros there. Even a nonzero one would add the same
            # q.b_k to every score of a query, which softmax cancels, so dropping it is exact.
            if part != "k":
                out[f"{dst}.{part}_proj.bias"] = bias[i * d : (i + 1) * d]

    def block(src: str, dst: str, cross: bool) -> None:
        norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
        split(f"{src}/self_attention/linear_0", f"{dst}.self_attn", ("q", "k", "v"))
        linear(f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj")
        if cross:
            norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
            linear(f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj")
            split(f"{src}/attention/linear_1", f"{dst}.encoder_attn", ("k", "v"))
            linear(f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj")
        norm(f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm")
        linear(f"{src}/ffn/linear_0", f"{dst}.fc1")
        linear(f"{src}/ffn/linear_1", f"{dst}.fc2")

    for conv in ("conv1", "conv2"):  # (d, in_channels, 3) in both layouts
        out[f"{enc}.{conv}.weight"], out[f"{enc}.{conv}.bias"] = (
            take(f"encoder/{conv}/weight"),
            take(f"encoder/{conv}/bias"),
        )
    out[f"{enc}.embed_positions.weight"] = take("encoder/position_encodings/encodings")
    for i in range(_layer_count(take.left, "encoder")):
        block(f"encoder/layer_{i}", f"{enc}.layers.{i}", cross=False)
    norm("encoder/layer_norm", f"{enc}.layer_norm")
    out[f"{dec}.embed_positions.weight"] = take("decoder/position_encodings/encodings")
    for i in range(_layer_count(take.left, "decoder")):
        block(f"decoder/layer_{i}", f"{dec}.layers.{i}", cross=True)
    norm("decoder/layer_norm", f"{dec}.layer_norm")
    projection = take.left.pop("decoder/projection/weight", None)
    if projection is not None and not np.array_equal(projection, out[f"{dec}.embed_tokens.weight"]):
        raise UnsupportedError(f"{model.path}: decoder/projection/weight is not tied to the embeddings")
    extra = sorted(n for n, v in take.left.items() if v.ndim > 0)
    if extra:
        raise UnsupportedError(
            f"{model.path}: variables blazr's Whisper does not know: {', '.join(extra[:8])}"
        )
    return out


def _ct2_config(model: CT2Model, weights: dict[str, np.ndarray], extra: dict[str, Any]) -> dict[str, Any]:
    embed = weights["model.decoder.embed_tokens.weight"]  # (vocab, d)
    vocab, d = embed.shape
    activation = int(model.scalar("decoder/activation", 3))
    config = whisper_config(
        vocab_size=vocab,
        d_model=d,
        encoder_layers=_layer_count(model.variables, "encoder"),
        decoder_layers=_layer_count(model.variables, "decoder"),
        encoder_attention_heads=int(model.scalar("encoder/num_heads")),
        decoder_attention_heads=int(model.scalar("decoder/num_heads")),
        encoder_ffn_dim=weights["model.encoder.layers.0.fc1.weight"].shape[0],
        decoder_ffn_dim=weights["model.decoder.layers.0.fc1.weight"].shape[0],
        num_mel_bins=weights["model.encoder.conv1.weight"].shape[1],
        max_source_positions=weights["model.encoder.embed_positions.weight"].shape[0],
        max_target_positions=weights["model.decoder.embed_positions.weight"].shape[0],
        activation_function=_CT2_ACTIVATIONS.get(activation, str(activation)),
        torch_dtype=str(embed.dtype),
    )
    # decoding options under HF generation-config names; the raw file and the format facts under "ct2"
    # (the converter writes null for what the HF checkpoint did not set)
    for ct2_key, hf_key in _CT2_DECODING_KEYS.items():
        if extra.get(ct2_key) is not None:
            config[hf_key] = [list(v) if isinstance(v, list) else v for v in extra[ct2_key]]
    config["ct2"] = dict(
        spec=model.spec, revision=model.revision, binary_version=model.binary_version, config=extra
    )
    return config


def check_complete(weights: dict[str, np.ndarray], config: dict[str, Any], source: Path) -> None:
    """Raise CheckpointError naming what is missing (a file cut at a tensor boundary reads cleanly but
    short) and UnsupportedError for weights a Whisper model does not have."""
    want = {f"model.encoder.{n}" for n in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias")}
    want |= {f"model.{side}.{n}" for side in ("encoder", "decoder") for n in _TOP_WEIGHTS}
    want.add("model.decoder.embed_tokens.weight")
    for side, count in (("encoder", config["encoder_layers"]), ("decoder", config["decoder_layers"])):
        names = _LAYER_WEIGHTS + (_CROSS_WEIGHTS if side == "decoder" else ())
        want |= {f"model.{side}.layers.{i}.{n}" for i in range(count) for n in names}
    missing, extra = sorted(want - weights.keys()), sorted(weights.keys() - want)
    if missing:
        raise CheckpointError(
            f"{source}: Whisper weights missing (truncated file?): {', '.join(missing[:6])}"
        )
    if extra:
        raise UnsupportedError(f"{source}: weights a Whisper model does not have: {', '.join(extra[:6])}")


_TOP_WEIGHTS = ("embed_positions.weight", "layer_norm.weight", "layer_norm.bias")
_LAYER_WEIGHTS = tuple(
    [f"self_attn.{p}_proj.{k}" for p in ("q", "v", "out") for k in ("weight", "bias")]
    + ["self_attn.k_proj.weight"]
    + [
        f"{m}.{k}"
        for m in ("self_attn_layer_norm", "final_layer_norm", "fc1", "fc2")
        for k in ("weight", "bias")
    ]
)
_CROSS_WEIGHTS = tuple(n.replace("self_attn", "encoder_attn") for n in _LAYER_WEIGHTS if "self_attn" in n)


def whisper_config(**dims: Any) -> dict[str, Any]:
    """An HF WhisperConfig dict from the shapes; the special-token ids follow from the vocabulary size
    (51864 English-only: <|endoftext|> 50256; 51865 and up multilingual: 50257), as openai-whisper has
    them."""
    eot = 50257 if dims["vocab_size"] >= 51865 else 50256
    config: dict[str, Any] = dict(
        architectures=["WhisperForConditionalGeneration"],
        model_type="whisper",
        activation_function="gelu",
        scale_embedding=False,
        tie_word_embeddings=True,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=eot + 1,
    )
    config.update(dims)
    return config
