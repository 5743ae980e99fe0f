"""Writes CTranslate2 model.bin files with numpy only, following CTranslate2's own serializer
(python/ctranslate2/specs/model_spec.py, binary version 6) and its Transformers Whisper converter, so the
reader in blazr.loaders.ctranslate2 is tested against the layout and not against itself.

`whisper_variables(weights, config, quantization)` turns Hugging Face Whisper weights (tests.tiny_whisper)
into CTranslate2's WhisperSpec variables: fused self-attention QKV with a zero K bias, fused cross-attention
KV, gamma/beta layer norms, position_encodings, the tied projection as an alias, and the spec's scalar
attributes. quantization is None (float32), "float16", "int8" (int8 weights + float32 per-row scales,
everything else float32) or "int8_float16" (the same with float16 for the rest), as the converter does it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

# CTranslate2's DataType order (include/ctranslate2/types.h)
DTYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4}


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<H", len(raw) + 1) + raw + b"\0"  # the length counts the closing NUL


def write_model_bin(
    path: Path,
    variables: dict[str, np.ndarray],
    spec: str,
    revision: int,
    aliases: dict[str, str] | None = None,
    version: int = 6,
) -> None:
    """variables and aliases in name order, as model_spec.py's _serialize writes them. Versions below 4
    store an item size and an item count instead of a dtype id and a byte count (model.cc reads 4 bytes as
    float32, 2 as int16, 1 as int8); version 1 has no spec name and revision, versions below 3 no aliases."""
    out = [struct.pack("<I", version)]
    if version >= 2:
        out += [_string(spec), struct.pack("<I", revision)]
    out.append(struct.pack("<I", len(variables)))
    for name in sorted(variables):
        value = np.asarray(variables[name])
        out += [_string(name), struct.pack("<B", value.ndim), struct.pack(f"<{value.ndim}I", *value.shape)]
        if version >= 4:
            out += [struct.pack("<B", DTYPE_IDS[value.dtype.name]), struct.pack("<I", value.nbytes)]
        else:
            out += [struct.pack("<B", value.itemsize), struct.pack("<I", value.size)]
        out.append(np.ascontiguousarray(value).tobytes())
    if version >= 3:
        aliases = aliases or {}
        out.append(struct.pack("<I", len(aliases)))
        for alias in sorted(aliases):
            out += [_string(alias), _string(aliases[alias])]
    Path(path).write_bytes(b"".join(out))


def _quantize(name: str, value: np.ndarray, quantization: str | None) -> dict[str, np.ndarray]:
    """One variable as the converter stores it: every `weight` (linear, embedding and, in CTranslate2 4.x,
    conv kernels: their specs have a weight_scale) is quantizable, the rest is only converted."""
    float_type = np.float16 if quantization in ("float16", "int8_float16") else np.float32
    if name.endswith("/weight") and quantization in ("int8", "int8_float16"):
        rows = value.reshape(value.shape[0], -1)  # (out, in * kernel)
        amax = np.abs(rows).max(axis=1)  # (out,)
        amax[amax == 0] = 127.0
        scale = (127.0 / amax).astype(np.float32)  # the converter multiplies: q = rint(w * scale)
        quantized = np.rint(rows * scale[:, None]).astype(np.int8).reshape(value.shape)
        return {name: quantized, name + "_scale": scale}
    return {name: value.astype(float_type)}


def whisper_variables(
    weights: dict[str, np.ndarray], config: dict, quantization: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(variables, aliases) of a WhisperSpec (revision 3) model.bin for these HF weights."""
    w = weights
    d = config["d_model"]
    ct2: dict[str, np.ndarray] = {}

    def norm(hf: str, ct: str) -> None:
        ct2[f"{ct}/gamma"], ct2[f"{ct}/beta"] = w[f"{hf}.weight"], w[f"{hf}.bias"]

    def linear(hf: str, ct: str) -> None:
        ct2[f"{ct}/weight"], ct2[f"{ct}/bias"] = w[f"{hf}.weight"], w[f"{hf}.bias"]

    def fused(hf: str, ct: str, parts: str) -> None:
        zero = np.zeros(d, np.float32)  # HF's k_proj has no bias; the converter stores zeros
        ct2[f"{ct}/weight"] = np.concatenate([w[f"{hf}.{p}_proj.weight"] for p in parts])  # (len * d, d)
        ct2[f"{ct}/bias"] = np.concatenate([w.get(f"{hf}.{p}_proj.bias", zero) for p in parts])

    def layer(hf: str, ct: str, cross: bool) -> None:
        norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
        fused(f"{hf}.self_attn", f"{ct}/self_attention/linear_0", "qkv")
        linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1")
        if cross:
            norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
            linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
            fused(f"{hf}.encoder_attn", f"{ct}/attention/linear_1", "kv")
            linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
        norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
        linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
        linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")

    enc, dec = "model.encoder", "model.decoder"
    for conv in ("conv1", "conv2"):
        ct2[f"encoder/{conv}/weight"], ct2[f"encoder/{conv}/bias"] = (
            w[f"{enc}.{conv}.weight"],
            w[f"{enc}.{conv}.bias"],
        )
    ct2["encoder/position_encodings/encodings"] = w[f"{enc}.embed_positions.weight"]
    for i in range(config["encoder_layers"]):
        layer(f"{enc}.layers.{i}", f"encoder/layer_{i}", cross=False)
    norm(f"{enc}.layer_norm", "encoder/layer_norm")
    ct2["decoder/embeddings/weight"] = w[f"{dec}.embed_tokens.weight"]
    ct2["decoder/position_encodings/encodings"] = w[f"{dec}.embed_positions.weight"]
    for i in range(config["decoder_layers"]):
        layer(f"{dec}.layers.{i}", f"decoder/layer_{i}", cross=True)
    norm(f"{dec}.layer_norm", "decoder/layer_norm")

    out: dict[str, np.ndarray] = {}
    for name, value in ct2.items():
        out |= _quantize(name, value, quantization)
    # the spec's scalar attributes, as the real tiny.en file has them
    out |= {
        "encoder/num_heads": np.int16(config["encoder_attention_heads"]),
        "decoder/num_heads": np.int16(config["decoder_attention_heads"]),
        "decoder/activation": np.int8(3),  # GELU
        "decoder/pre_norm": np.int8(1),
        "decoder/scale_embeddings": np.int8(0),
        "decoder/alignment_layer": np.int16(-1),
        "decoder/alignment_heads": np.int16(1),
        "decoder/alibi": np.int8(0),
        "decoder/start_from_zero_embedding": np.int8(0),
    }
    # the output projection equals the embeddings, so the converter stores it as an alias
    return out, {"decoder/projection/weight": "decoder/embeddings/weight"}


def write_whisper_ct2(
    weights: dict[str, np.ndarray], config: dict, directory: Path, quantization: str | None = None
) -> Path:
    """A faster-whisper style directory: model.bin + the converter's config.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    variables, aliases = whisper_variables(weights, config, quantization)
    write_model_bin(directory / "model.bin", variables, "WhisperSpec", 3, aliases)
    eot = config["eos_token_id"]
    extra = dict(
        alignment_heads=[[config["decoder_layers"] - 1, 0]],
        lang_ids=[],
        suppress_ids=[1, 2, 7],
        suppress_ids_begin=[220, eot],
    )
    (directory / "config.json").write_text(json.dumps(extra, indent=2, sort_keys=True))
    return directory
