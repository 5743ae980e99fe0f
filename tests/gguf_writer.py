"""Test helper: write a GGUF file from HF-named numpy tensors and an HF config, the way llama.cpp's
convert_hf_to_gguf.py does (llama.cpp's own tensor-name map, Q/K row permutation, metadata keys, llama3 RoPE
as a rope_freqs tensor), optionally quantizing chosen tensors with gguf.quants.quantize.

Example: write_gguf(tmp / "tiny.gguf", config, weights, "F16", quantize={"lm_head.weight": "Q8_0"})
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

# HF model_type -> the general.architecture llama.cpp writes (it converts Mistral checkpoints as llama)
GGUF_ARCH_FOR = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma3_text": "gemma3",
}
NORM_SHIFTED_ARCHS = ("gemma3",)  # the converter stores Gemma's RMSNorm weights as 1 + w
PERMUTED_ARCHS = ("llama", "mistral")


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp LlamaModel.permute: HF half-split RoPE rows -> interleaved pairs, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(
    path: str | Path,
    config: dict[str, Any],
    tensors: dict[str, np.ndarray],
    dtype: str = "F32",
    *,
    tokenizer: dict[str, Any] | None = None,
    quantize: str | dict[str, str] | None = None,
    arch: str | None = None,
) -> Path:
    """Write `tensors` (HF names, HF layout) and `config` as a GGUF file; returns its path.

    tokenizer: optional GGUF tokenizer fields by short name: model, pre, tokens, scores, token_type, merges,
      bos_token_id, eos_token_id, unknown_token_id, padding_token_id, add_bos_token, chat_template.
    dtype: "F32" or "F16", the type of every dense tensor of 2+ dims that `quantize` leaves alone.
    quantize: one GGML type name for every 2-D weight whose rows fit its block size, or {hf_name: type}
      (a type may be F32/F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, the ones gguf.quants can write).
    arch: general.architecture to write (default: what llama.cpp writes for config["model_type"]).
    """
    path = Path(path)
    arch = arch or GGUF_ARCH_FOR[config.get("model_type", "llama")]
    writer = gguf.GGUFWriter(path, arch)
    _write_config(writer, config)
    _write_tokenizer(writer, config, tokenizer or {})
    for gguf_name, data, qtype in _gguf_tensors(tensors, config, arch, quantize or {}, dtype):
        if qtype is None:
            writer.add_tensor(gguf_name, data)
        else:
            writer.add_tensor(gguf_name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_config(w: gguf.GGUFWriter, c: dict[str, Any]) -> None:
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    w.add_name("blazr-test")
    w.add_context_length(c.get("max_position_embeddings", 2048))
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(c.get("num_key_value_heads", heads))
    w.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    w.add_rope_freq_base(c.get("rope_theta", 10000.0))
    w.add_vocab_size(c["vocab_size"])
    w.add_rope_dimension_count(head_dim)
    if c.get("head_dim") is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if c.get("sliding_window") and c.get("use_sliding_window", True):
        w.add_sliding_window(c["sliding_window"])
    _write_rope_scaling(w, c.get("rope_scaling") or {})


def _write_rope_scaling(w: gguf.GGUFWriter, scaling: dict[str, Any]) -> None:
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(scaling["factor"])
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(scaling["factor"])
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    # llama3 scaling is written as the rope_freqs tensor, like llama.cpp does (see _llama3_rope_freqs)


def _write_tokenizer(w: gguf.GGUFWriter, config: dict[str, Any], tok: dict[str, Any]) -> None:
    fields = {
        "model": w.add_tokenizer_model,
        "pre": w.add_tokenizer_pre,
        "tokens": w.add_token_list,
        "scores": w.add_token_scores,
        "token_type": w.add_token_types,
        "merges": w.add_token_merges,
        "unknown_token_id": w.add_unk_token_id,
        "padding_token_id": w.add_pad_token_id,
        "add_bos_token": w.add_add_bos_token,
        "chat_template": w.add_chat_template,
    }
    for key, add in fields.items():
        if key in tok:
            add(tok[key])
    bos = tok.get("bos_token_id", config.get("bos_token_id"))
    eos = tok.get("eos_token_id", config.get("eos_token_id"))
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)


def _gguf_tensors(tensors: dict[str, np.ndarray], config: dict[str, Any], arch: str, quantize, dtype: str):
    """Yield (gguf_name, array, raw_dtype or None) in the converter's layout."""
    model_arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == GGUF_ARCH_FOR.get(arch, arch))
    name_map = gguf.get_tensor_name_map(model_arch, config["num_hidden_layers"])
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    for hf_name, data in tensors.items():
        if hf_name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue  # the converter drops a tied output matrix
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"no GGUF name for {hf_name}")
        if arch in PERMUTED_ARCHS and ".self_attn.q_proj." in hf_name:
            data = permute_qk(data, heads)
        elif arch in PERMUTED_ARCHS and ".self_attn.k_proj." in hf_name:
            data = permute_qk(data, kv_heads)
        if arch in NORM_SHIFTED_ARCHS and hf_name.endswith("norm.weight"):
            data = data + np.float32(1.0)
        type_name = _quant_type(hf_name, data, quantize) or dtype
        yield (gguf_name, *_encode(np.ascontiguousarray(data), type_name))
    if (config.get("rope_scaling") or {}).get("rope_type") == "llama3":
        yield "rope_freqs.weight", _llama3_rope_freqs(config), None


def _quant_type(hf_name: str, data: np.ndarray, quantize) -> str | None:
    if isinstance(quantize, dict):
        return quantize.get(hf_name)
    if data.ndim != 2:
        return None
    block_size = GGML_QUANT_SIZES[GGMLQuantizationType[quantize]][0]
    return quantize if data.shape[-1] % block_size == 0 else None


def _encode(data: np.ndarray, type_name: str) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    """Dense 2-D+ tensors are written as F32 or F16; 1-D ones always F32 (llama.cpp keeps norms F32)."""
    if type_name in ("F32", "F16"):
        as_f16 = type_name == "F16" and data.ndim > 1
        return data.astype(np.float16 if as_f16 else np.float32), None
    qtype = GGMLQuantizationType[type_name]
    return gguf.quants.quantize(data.astype(np.float32), qtype), qtype


def _llama3_rope_freqs(config: dict[str, Any]) -> np.ndarray:
    """The per-frequency divisors llama.cpp's LlamaModel.generate_extra_tensors writes for llama3 RoPE."""
    scaling = config["rope_scaling"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    factor, old_ctx = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    freqs = 1.0 / (
        config.get("rope_theta", 10000.0) ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
    )
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)
