"""Reader for whisper.cpp's ggml `.bin` files (the pre-GGUF format its models/convert-pt-to-ggml.py writes,
its quantize tool rewrites, and whisper_model_load reads), with the weights renamed from openai-whisper's
names to Hugging Face's.

Layout, all little-endian int32 unless said:
    magic 0x67676d6c, then n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx,
    n_text_state, n_text_head, n_text_layer, n_mels, ftype (+ 1000 * quantization version when quantized)
    mel filters: n_mel, n_fft, then n_mel * n_fft float32
    vocab: count, then per token a uint32 byte length and the bytes (the GPT-2 ranks only, no specials)
    tensors until the end of the file: n_dims, name length, ggml type id, ne[n_dims] (innermost first),
        the name, then the data with no padding; a quantized row of ne[0] values is ne[0] / block_elems
        blocks, exactly as in GGUF
The converter writes conv biases as (d, 1) and every 1-d tensor, the conv biases and the position tables
in float32; the large matrices are float16 or quantized, the conv kernels float16.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from blazr.errors import CheckpointError, UnsupportedError

MAGIC = 0x67676D6C
HPARAMS = (
    "n_vocab",
    "n_audio_ctx",
    "n_audio_state",
    "n_audio_head",
    "n_audio_layer",
    "n_text_ctx",
    "n_text_state",
    "n_text_head",
    "n_text_layer",
    "n_mels",
    "ftype",
)
QNT_VERSION_FACTOR = 1000  # ggml stores ftype + 1000 * GGML_QNT_VERSION in quantized files

# openai-whisper names (per layer, after "blocks.N.") -> HF names (after "layers.N.")
_BLOCK_NAMES = {
    "attn.query": "self_attn.q_proj",
    "attn.key": "self_attn.k_proj",
    "attn.value": "self_attn.v_proj",
    "attn.out": "self_attn.out_proj",
    "attn_ln": "self_attn_layer_norm",
    "cross_attn.query": "encoder_attn.q_proj",
    "cross_attn.key": "encoder_attn.k_proj",
    "cross_attn.value": "encoder_attn.v_proj",
    "cross_attn.out": "encoder_attn.out_proj",
    "cross_attn_ln": "encoder_attn_layer_norm",
    "mlp.0": "fc1",
    "mlp.2": "fc2",
    "mlp_ln": "final_layer_norm",
}
_TOP_NAMES = {
    "encoder.conv1": "model.encoder.conv1",
    "encoder.conv2": "model.encoder.conv2",
    "encoder.ln_post": "model.encoder.layer_norm",
    "decoder.token_embedding": "model.decoder.embed_tokens",
    "decoder.ln": "model.decoder.layer_norm",
}
_POSITIONS = {
    "encoder.positional_embedding": "model.encoder.embed_positions.weight",
    "decoder.positional_embedding": "model.decoder.embed_positions.weight",
}
_BLOCK = re.compile(r"(encoder|decoder)\.blocks\.(\d+)\.(.+)\.(weight|bias)")
_TOP = re.compile(r"(.+)\.(weight|bias)")


@dataclass
class GGMLWhisper:
    """Everything in a whisper.cpp file. `tensors` are under openai-whisper's names with numpy shapes
    (outermost first), dense: float32 or float16 as stored, quantized types dequantized to float32."""

    path: Path
    hparams: dict[str, int]  # HPARAMS, ftype without the quantization version
    mel_filters: np.ndarray  # (n_mels, n_fft / 2 + 1) float32, the filterbank the model was trained with
    vocab: list[bytes]  # token bytes by id (GPT-2 ranks; the special tokens are not stored)
    tensors: dict[str, np.ndarray]
    tensor_types: dict[str, str]  # name -> ggml type name as stored ("F16", "Q8_0", ...)


def hf_name(name: str) -> str | None:
    """The HF name of an openai-whisper weight name, or None when it is not one."""
    if name in _POSITIONS:
        return _POSITIONS[name]
    if m := _BLOCK.fullmatch(name):
        side, layer, module, kind = m.groups()
        if module in _BLOCK_NAMES and (side == "decoder" or not module.startswith("cross_attn")):
            return f"model.{side}.layers.{layer}.{_BLOCK_NAMES[module]}.{kind}"
        return None
    if (m := _TOP.fullmatch(name)) and m.group(1) in _TOP_NAMES:
        return f"{_TOP_NAMES[m.group(1)]}.{m.group(2)}"
    return None


def read_ggml_whisper(path: str | Path) -> GGMLWhisper:
    path = Path(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    pos = 0

    def take(n: int, what: str) -> np.ndarray:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise CheckpointError(
                f"{path}: file is truncated or corrupt: {what} needs {n} bytes at offset {pos} "
                f"but the file has {len(data)} bytes"
            )
        pos += n
        return data[pos - n : pos]

    def ints(n: int, what: str) -> list[int]:
        return list(struct.unpack(f"<{n}i", take(4 * n, what).tobytes()))

    if len(data) < 4 or ints(1, "magic") != [MAGIC]:
        raise UnsupportedError(f"{path}: not a whisper.cpp ggml file (no 'ggml' magic)")
    hparams = dict(zip(HPARAMS, ints(len(HPARAMS), "hyperparameters"), strict=True))
    hparams["ftype"] %= QNT_VERSION_FACTOR
    n_mel, n_fft = ints(2, "mel filter shape")
    if not (0 < n_mel <= 1024 and 0 < n_fft <= 65536):
        raise CheckpointError(f"{path}: mel filter shape {n_mel}x{n_fft} is not plausible (corrupt file?)")
    mel_filters = take(4 * n_mel * n_fft, "mel filters").view("<f4").reshape(n_mel, n_fft)
    (n_tokens,) = ints(1, "vocab size")
    vocab = [take(ints(1, "token length")[0], f"token {i}").tobytes() for i in range(max(n_tokens, 0))]
    tensors: dict[str, np.ndarray] = {}
    types: dict[str, str] = {}
    while pos < len(data):
        n_dims, name_len, type_id = ints(3, "tensor header")
        if not (0 < n_dims <= 4 and 0 < name_len <= 4096):
            raise CheckpointError(f"{path}: tensor header at offset {pos - 12} is corrupt")
        ne = ints(n_dims, "tensor dims")  # innermost first
        try:
            name = take(name_len, "tensor name").tobytes().decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{path}: tensor name at offset {pos - name_len} is not UTF-8") from None
        qtype = _qtype(path, name, type_id)
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        if any(n <= 0 for n in ne) or ne[0] % block_elems:
            raise CheckpointError(f"{path}: tensor {name} has dims {ne} that do not fit {qtype.name} blocks")
        rows = int(np.prod(ne[1:], dtype=np.int64))
        raw = take(rows * ne[0] // block_elems * block_bytes, f"data of {name}").reshape(rows, -1)
        tensors[name] = _decode(raw, qtype).reshape(tuple(reversed(ne)))
        types[name] = qtype.name
    return GGMLWhisper(path, hparams, mel_filters, vocab, tensors, types)


def _qtype(path: Path, name: str, type_id: int) -> GGMLQuantizationType:
    try:
        qtype = GGMLQuantizationType(type_id)
    except ValueError:
        raise CheckpointError(f"{path}: tensor {name} has unknown ggml type id {type_id}") from None
    if qtype not in GGML_QUANT_SIZES:
        raise UnsupportedError(f"{path}: tensor {name} has ggml type {qtype.name}, which blazr cannot read")
    return qtype


def _decode(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """(rows, row_bytes) uint8 -> (rows, ne0): F32/F16 as views of the file, the rest dequantized."""
    if qtype == GGMLQuantizationType.F32:
        return raw.view("<f4")
    if qtype == GGMLQuantizationType.F16:
        return raw.view("<f2")
    if qtype == GGMLQuantizationType.BF16:
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    try:
        return dequantize(np.ascontiguousarray(raw), qtype)
    except NotImplementedError:
        raise UnsupportedError(f"ggml type {qtype.name} cannot be dequantized by the gguf package") from None


def whisper_from_ggml(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(config, weights) in HF names from a whisper.cpp file; config["ggml"] keeps the ftype and the tensor
    types. The file's mel filters and vocab are on `read_ggml_whisper(path)` for whoever needs them."""
    from blazr.loaders.whisper_formats import check_complete, whisper_config

    model = read_ggml_whisper(path)
    weights: dict[str, np.ndarray] = {}
    for name, value in model.tensors.items():
        target = hf_name(name)
        if target is None:
            raise UnsupportedError(f"{model.path}: tensor {name} is not an openai-whisper weight")
        if target.endswith(".bias") and value.ndim == 2 and 1 in value.shape:
            value = value.reshape(-1)  # conv biases are stored (d, 1) (older files (1, d))
        weights[target] = value
    h = model.hparams
    if h["n_audio_state"] != h["n_text_state"]:
        raise UnsupportedError(
            f"{model.path}: audio and text widths differ ({h['n_audio_state']}, {h['n_text_state']})"
        )
    d = h["n_audio_state"]
    # the ffn width is the fc1 rows (whisper.cpp itself assumes 4 * d); a missing fc1 is reported below
    ffn = {
        side: weights.get(f"model.{side}.layers.0.fc1.weight", np.empty((4 * d, 0))).shape[0]
        for side in ("encoder", "decoder")
    }
    config = whisper_config(
        vocab_size=h["n_vocab"],
        d_model=d,
        encoder_layers=h["n_audio_layer"],
        decoder_layers=h["n_text_layer"],
        encoder_attention_heads=h["n_audio_head"],
        decoder_attention_heads=h["n_text_head"],
        encoder_ffn_dim=ffn["encoder"],
        decoder_ffn_dim=ffn["decoder"],
        num_mel_bins=h["n_mels"],
        max_source_positions=h["n_audio_ctx"],
        max_target_positions=h["n_text_ctx"],
    )
    check_complete(weights, config, model.path)
    embed = weights["model.decoder.embed_tokens.weight"]
    if embed.shape != (h["n_vocab"], h["n_text_state"]):
        raise CheckpointError(
            f"{model.path}: token embedding is {embed.shape}, "
            f"hparams say ({h['n_vocab']}, {h['n_text_state']})"
        )
    config["ggml"] = dict(ftype=h["ftype"], tensor_types=model.tensor_types)
    return config, weights
