"""Writes whisper.cpp ggml `.bin` files with numpy (and gguf's quantizer), following whisper.cpp's
models/convert-pt-to-ggml.py and its quantize tool, so blazr.loaders.whisper_ggml is tested against the
format as whisper.cpp writes it.

The weights are tests.tiny_whisper's HF tensors under openai-whisper's names. Type rules, per the converter:
"f32" writes everything float32; "f16" writes 1-d tensors, the conv biases (reshaped to (d, 1)) and both
position tables as float32 and the rest float16; a quantized type ("q8_0", "q4_0", ...) then quantizes
every 2-d tensor except the conv biases and position tables, as the quantize tool does (conv kernels are
3-d, so they stay float16).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType
from gguf.quants import quantize

MAGIC = 0x67676D6C
# ggml's ftype values (GGML_FTYPE_*) for the header; quantized files add 1000 * GGML_QNT_VERSION (2)
FTYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q8_0": 7}
_NOT_QUANTIZED = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}
_BLOCK = {
    "self_attn.q_proj": "attn.query",
    "self_attn.k_proj": "attn.key",
    "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out",
    "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query",
    "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value",
    "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln",
    "fc1": "mlp.0",
    "fc2": "mlp.2",
    "final_layer_norm": "mlp_ln",
}
_TOP = {
    "model.encoder.conv1": "encoder.conv1",
    "model.encoder.conv2": "encoder.conv2",
    "model.encoder.layer_norm": "encoder.ln_post",
    "model.decoder.embed_tokens": "decoder.token_embedding",
    "model.decoder.layer_norm": "decoder.ln",
}


def openai_name(hf: str) -> str:
    if hf.endswith("embed_positions.weight"):
        return hf.split(".")[1] + ".positional_embedding"
    module, kind = hf.rsplit(".", 1)
    if ".layers." in module:
        _, side, _, layer, rest = module.split(".", 4)
        return f"{side}.blocks.{layer}.{_BLOCK[rest]}.{kind}"
    return f"{_TOP[module]}.{kind}"


def mel_filters(n_mels: int) -> np.ndarray:
    """(n_mels, 201) float32 stand-in filterbank (the file only carries it)."""
    return np.random.default_rng(7).random((n_mels, 201), dtype=np.float32)


VOCAB = [b"!", b"hello", b" world", b"", b"\xe2\x96"]  # a few tokens, one empty, one not UTF-8


def write_whisper_ggml(weights: dict[str, np.ndarray], config: dict, path: Path, ftype: str = "f16") -> Path:
    """weights: HF Whisper tensors (float32); config: its HF config. Returns path."""
    header = [
        config["vocab_size"],
        config["max_source_positions"],
        config["d_model"],
        config["encoder_attention_heads"],
        config["encoder_layers"],
        config["max_target_positions"],
        config["d_model"],
        config["decoder_attention_heads"],
        config["decoder_layers"],
        config["num_mel_bins"],
        FTYPES[ftype] + (2000 if ftype not in ("f32", "f16") else 0),
    ]
    filters = mel_filters(config["num_mel_bins"])
    out = [struct.pack("<12i", MAGIC, *header), struct.pack("<2i", *filters.shape), filters.tobytes()]
    out.append(struct.pack("<i", len(VOCAB)))
    out += [struct.pack("<I", len(token)) + token for token in VOCAB]
    for hf, value in weights.items():
        out.append(_tensor(openai_name(hf), value, ftype))
    Path(path).write_bytes(b"".join(out))
    return Path(path)


def _tensor(name: str, value: np.ndarray, ftype: str) -> bytes:
    data = value.squeeze()
    if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
        data = data.reshape(data.shape[0], 1)  # the converter writes conv biases as (d, 1)
    if ftype == "f32" or data.ndim < 2 or name in _NOT_QUANTIZED:
        qtype, raw = GGMLQuantizationType.F32, data.astype(np.float32).tobytes()
    elif ftype == "f16" or data.ndim != 2:
        qtype, raw = GGMLQuantizationType.F16, data.astype(np.float16).tobytes()
    else:
        qtype = GGMLQuantizationType[ftype.upper()]
        raw = quantize(data.astype(np.float32), qtype).tobytes()
    encoded = name.encode("utf-8")
    dims = list(reversed(data.shape))  # ggml's ne: innermost first
    head = struct.pack("<3i", data.ndim, len(encoded), int(qtype)) + struct.pack(f"<{data.ndim}i", *dims)
    return head + encoded + raw
