"""Hugging Face SafeTensors -> GGUF as llama.cpp's convert_hf_to_gguf.py writes it (tensor names, q/k row order,
hparams), so llama.cpp loads the file and blazr loads it as it loads theirs.

Families: the ones whose GGUF layout is the plain decoder's (Llama, Mistral, Qwen2, Qwen3); any other names
itself and nothing is written. Quantization by the `gguf` package's quantizers (ports of ggml's reference
quantizers: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, BF16); 1-D tensors stay F32 and a 2-D tensor whose rows do not fill
whole blocks falls back to F16, as llama.cpp's converter does. The K-quant mixtures (q4_k_m, q4_k_s, q5_k_m,
q5_k_s, q6_k), which llama.cpp's converter leaves to llama-quantize, are written directly: each tensor's type
as llama-quantize picks it (blazr/convert/quant_mixture.py), its blocks by blazr's ports of ggml's K-quant
quantizers (blazr/convert/k_quants.py). Memory: one tensor at a time (the header is
written first from every tensor's final size, then each tensor is read, converted, written and dropped). The
file is written under a temporary name and renamed at the end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from blazr.convert.gguf_vocab_writer import write_tokenizer
from blazr.convert.quant_mixture import K_OUTTYPES, MixturePlan, is_seventy_b, quantize_order
from blazr.errors import UnsupportedError

# model_type -> GGUF general.architecture (llama.cpp writes Mistral as "llama", without its sliding window)
ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
OUTTYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", *K_OUTTYPES)


def safetensors_to_gguf(
    src: Path, out: Path, outtype: str, on_progress: Callable[[float, float | None], None] | None = None
) -> Path:
    import gguf

    from blazr.loaders import load_checkpoint
    from blazr.models import gguf_family

    if outtype not in OUTTYPES:
        raise UnsupportedError(f"--outtype {outtype!r} is not one blazr writes ({', '.join(OUTTYPES)})")
    ckpt = load_checkpoint(src)
    if ckpt.format != "safetensors":
        raise UnsupportedError(f"{src} is {ckpt.format}, not a SafeTensors model directory")
    config = ckpt.config
    model_type = config.get("model_type")
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise UnsupportedError(
            f"converting model_type {model_type!r} to GGUF is not supported yet "
            f"(supported: {', '.join(sorted(ARCHITECTURES))})"
        )
    family = gguf_family(arch)
    names = _hf_to_gguf_names(family.GGUF_TENSOR_NAMES)
    tensors = _planned(ckpt.tensors, names, arch, config)
    factors = rope_freq_factors(config)
    if factors is not None:  # llama.cpp writes llama3 RoPE as per-frequency divisors, first in the file
        tensors = {"rope_freqs.weight": (None, factors.shape, lambda _: factors)} | tensors
    partial = out.with_name(out.name + ".partial")
    try:
        writer = gguf.GGUFWriter(partial, arch)
        _write_hparams(writer, arch, config, outtype, src.name)
        write_tokenizer(writer, Path(src), config)
        qtypes = _tensor_types(tensors, outtype, arch, config)
        for name, (_, shape, _) in tensors.items():
            qtype = qtypes[name]
            dtype = {gguf.GGMLQuantizationType.F32: np.float32, gguf.GGMLQuantizationType.F16: np.float16}
            if qtype in dtype:
                writer.add_tensor_info(
                    name, shape, np.dtype(dtype[qtype]), _nbytes(shape, qtype), raw_dtype=qtype
                )
            else:  # packed blocks: described by their byte shape (rows, bytes per row)
                packed = gguf.quant_shape_to_byte_shape(shape, qtype)
                writer.add_tensor_info(
                    name, packed, np.dtype(np.uint8), _nbytes(shape, qtype), raw_dtype=qtype
                )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for i, (name, (hf_name, _shape, transform)) in enumerate(tensors.items()):
            raw = None if hf_name is None else np.asarray(ckpt.tensors[hf_name].load(), dtype=np.float32)
            data = transform(raw)  # (rows, cols), or (R/2,) for rope_freqs
            writer.write_tensor_data(_encode(data, qtypes[name]))
            if on_progress is not None:
                on_progress(i + 1, len(tensors))
        writer.close()
        partial.replace(out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return out


def _hf_to_gguf_names(family_names: dict[str, str]) -> list[tuple[re.Pattern, str]]:
    """(regex over an HF tensor base name, GGUF template) pairs from the GGUF -> HF tables, reversed."""
    from blazr.loaders.gguf import GGUF_TO_HF

    out = []
    for gguf_name, hf_name in (GGUF_TO_HF | family_names).items():
        if "{E}" in gguf_name:
            continue  # per-expert tensors: not a dense family's
        pattern = re.escape(hf_name).replace(r"\{N\}", r"(?P<N>\d+)")
        out.append((re.compile(f"^{pattern}$"), gguf_name))
    return out


def _planned(hf_tensors: dict[str, Any], names, arch: str, config: dict[str, Any]) -> dict[str, tuple]:
    """GGUF name -> (HF name, GGUF shape, transform of the float32 array), in the checkpoint's order."""
    from blazr.loaders.gguf import _permuted_heads

    heads = {"q_proj": config["num_attention_heads"], "k_proj": config.get("num_key_value_heads")}
    heads["k_proj"] = heads["k_proj"] or heads["q_proj"]
    tied = config.get("tie_word_embeddings", False)
    out = {}
    for hf_name in hf_tensors:
        if hf_name.endswith("rotary_emb.inv_freq") or (tied and hf_name == "lm_head.weight"):
            continue
        base, _, suffix = hf_name.rpartition(".")
        gguf_name = next((g.format(**m.groupdict()) for r, g in names if (m := r.match(base))), None)
        if gguf_name is None:
            raise UnsupportedError(f"tensor {hf_name!r} has no GGUF name in blazr's tables for this family")
        n_head = _permuted_heads(hf_name, heads) if arch == "llama" else None
        transform = (lambda a, n=n_head: _permute_qk(a, n)) if n_head else (lambda a: a)
        out[f"{gguf_name}.{suffix}"] = (hf_name, tuple(hf_tensors[hf_name].shape), transform)
    return out


def _permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: HF's half-split RoPE rows -> interleaved pairs, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tensor_types(
    tensors: dict[str, tuple], outtype: str, arch: str, config: dict[str, Any]
) -> dict[str, Any]:
    """GGUF name -> ggml type: one type for every 2-D tensor, or a K-quant mixture's per-tensor choice."""
    from gguf import GGMLQuantizationType

    if outtype not in K_OUTTYPES:
        return {name: _qtype(shape, outtype) for name, (_, shape, _) in tensors.items()}
    plan = MixturePlan(outtype, list(tensors), config["num_hidden_layers"], is_seventy_b(arch, config))
    out = {}
    for name in sorted(tensors, key=quantize_order):  # the order llama-quantize counts layers in
        shape = tensors[name][1]
        quantized = len(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
        out[name] = (
            GGMLQuantizationType[plan.type_for(name, shape[-1])] if quantized else GGMLQuantizationType.F32
        )
    return {name: out[name] for name in tensors}


def _qtype(shape: tuple[int, ...], outtype: str):
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if len(shape) < 2 or outtype == "f32":
        return GGMLQuantizationType.F32
    qtype = GGMLQuantizationType[outtype.upper()]
    block = GGML_QUANT_SIZES[qtype][0]
    return qtype if shape[-1] % block == 0 else GGMLQuantizationType.F16


def _nbytes(shape: tuple[int, ...], qtype) -> int:
    from gguf import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape[:-1], dtype=np.int64)) * (shape[-1] // block) * size


def _encode(data: np.ndarray, qtype) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    from blazr.convert.k_quants import BLOCK_BYTES, quantize_k

    if qtype == GGMLQuantizationType.F32:
        return data.astype(np.float32)
    if qtype.name in BLOCK_BYTES:
        return quantize_k(data, qtype.name)
    return quants.quantize(data, qtype)


def _write_hparams(writer, arch: str, config: dict[str, Any], outtype: str, name: str) -> None:
    import gguf

    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    writer.add_name(name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads") or heads)
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_file_type(_file_type(outtype))
    if arch == "llama":
        writer.add_vocab_size(config["vocab_size"])
        writer.add_rope_dimension_count(head_dim)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def rope_freq_factors(config: dict[str, Any]) -> np.ndarray | None:
    """llama.cpp's rope_freqs tensor for a llama3-scaled RoPE (R/2,): each frequency's divisor, in float32 as
    its converter computes it; None without scaling. Other scalings are refused by name."""
    from blazr.models.layers.rope import rope_type

    scaling = config.get("rope_scaling")
    kind = rope_type(scaling)
    if kind == "default":
        return None
    if kind == "freq_factors":  # a GGUF's rope_freqs carried through blazr's SafeTensors output as they were
        return np.asarray(scaling["factors"], dtype=np.float32)
    if kind != "llama3":
        raise UnsupportedError(f"rope_scaling type {kind!r}: converting it to GGUF is not supported yet")
    f32 = np.float32
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = f32(1.0) / (
        f32(config.get("rope_theta", 10000.0)) ** (np.arange(0, dim, 2, dtype=f32) / f32(dim))
    )
    factor = f32(scaling.get("factor", 8.0))
    low, high = f32(scaling.get("low_freq_factor", 1.0)), f32(scaling.get("high_freq_factor", 4.0))
    old = f32(scaling.get("original_max_position_embeddings", 8192))
    out = []
    for freq in freqs:
        wavelen = f32(2 * np.pi) / freq
        if wavelen < old / high:
            out.append(f32(1.0))
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(f32(1.0) / ((f32(1.0) - smooth) / factor + smooth))
    return np.asarray(out, dtype=f32)  # (R/2,)


def _file_type(outtype: str) -> int:
    import gguf

    kinds = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16"}
    return gguf.LlamaFileType[kinds.get(outtype, f"MOSTLY_{outtype.upper()}")].value
