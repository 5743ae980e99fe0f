"""Tiny random-weight checkpoints of every family, made from a fixed seed with numpy only (Llama, Mistral, Qwen2,
Qwen3 and Gemma 3 here; the others in tests/tiny_zoo).

Used by tests/parity/make_reference.py (which runs them through transformers to make tests/golden/) and by
tests/test_parity.py (which writes the same weights as SafeTensors or GGUF and runs them through blazr).
Changing anything here changes the weights: rerun make_reference.py and commit the new golden files.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import pkgutil
import re
import struct
from pathlib import Path

import numpy as np

import tests.tiny_zoo

# the first five are defined here; every other family has a module in tests/tiny_zoo (CONFIG, SEED, weights)
ZOO = tuple(
    sorted(m.name for m in pkgutil.iter_modules(tests.tiny_zoo.__path__) if not m.name.startswith("_"))
)
MODELS = ("llama", "mistral", "qwen2", "qwen3", "gemma3") + ZOO
STORAGES = ("f32", "f16", "bf16", "gguf_f16")  # how the weights are rounded on disk; GGUF F32 == "f32"
PROMPT_IDS = (1, 17, 99, 3, 250, 64, 128, 7)
NEW_TOKENS = 64

_SHAPE = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
    torch_dtype="float32",
)

_CONFIGS = {
    "llama": dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        rope_theta=10000.0,
        # original_max_position_embeddings 64 puts the 8 frequencies of head_dim 16 in all three llama3
        # bands: kept (wavelength < 16), smoothed (16..64) and divided by `factor` (> 64).
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
    ),
    "mistral": dict(
        architectures=["MistralForCausalLM"],
        model_type="mistral",
        rope_theta=10000.0,
        sliding_window=16,  # shorter than the 8 + 64 test tokens, so the window changes the logits
        tie_word_embeddings=False,
    ),
    "qwen2": dict(
        architectures=["Qwen2ForCausalLM"],
        model_type="qwen2",
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        # As in real Qwen2.5 configs: a window is named but switched off, so it must be ignored.
        use_sliding_window=False,
        sliding_window=32,
        max_window_layers=2,
    ),
    "qwen3": dict(
        architectures=["Qwen3ForCausalLM"],
        model_type="qwen3",
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        head_dim=32,  # wider than hidden_size / heads (16), as in real Qwen3 (128 vs 64)
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=2,
    ),
    "gemma3": dict(
        architectures=["Gemma3ForCausalLM"],
        model_type="gemma3_text",
        hidden_act="gelu_pytorch_tanh",
        hidden_activation="gelu_pytorch_tanh",
        # six layers: five sliding-window (local, RoPE base 10k) and one global (base 1M), Gemma 3's 5:1; the
        # pattern and the local base are llama.cpp's defaults, which its GGUF converter does not write
        num_hidden_layers=6,
        sliding_window_pattern=6,
        sliding_window=16,
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        query_pre_attn_scalar=16,  # = head_dim, as llama.cpp assumes for every size but 27B
        tie_word_embeddings=True,
        attention_bias=False,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    ),
}

# qk-norm fixes each head's |q| and |k| near sqrt(Dh), which flattens attention: a gain of 3 makes it peaked
# again, as the q/k gain of 2 does for the other models (at 1, every seed tried repeated one token).
QK_NORM_GAIN = 3.0
_SEEDS = {
    "llama": 1001,
    "mistral": 2002,
    "qwen2": 3004,
    "qwen3": 4002,
    "gemma3": 5006,
}  # 3003 falls into repeating one token after 9


def _zoo(name: str):
    return importlib.import_module(f"tests.tiny_zoo.{name}")


def tiny_config(name: str) -> dict:
    """The Hugging Face config.json dict of tiny model `name` (one of MODELS)."""
    own = _zoo(name).CONFIG if name in ZOO else _CONFIGS[name]
    return {**copy.deepcopy(_SHAPE), **copy.deepcopy(own)}


def transformers_checkpoint(name: str, weights: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """(config, weights) for transformers' reference run: the tiny model itself, or for a family transformers has
    no class for (InternLM2) the equivalent checkpoint its zoo module's as_transformers makes."""
    cfg = tiny_config(name)
    convert = getattr(_zoo(name), "as_transformers", None) if name in ZOO else None
    return (cfg, weights) if convert is None else convert(cfg, weights)


class Draw:
    """Seeded random tensors at the scales the tiny models use (see tiny_weights for why these scales)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def linear(self, out_f: int, in_f: int, gain: float = 1.0) -> np.ndarray:
        """(out_f, in_f) with rows of norm ~gain."""
        return (self.rng.standard_normal((out_f, in_f)) * gain / np.sqrt(in_f)).astype(np.float32)

    def norm(self, n: int) -> np.ndarray:
        """(n,) around 1, far enough that a skipped or misplaced norm shows in the logits."""
        return (1.0 + 0.2 * self.rng.standard_normal(n)).astype(np.float32)

    def normal(self, *shape: int, std: float = 1.0) -> np.ndarray:
        return (std * self.rng.standard_normal(shape)).astype(np.float32)


def tiny_weights(name: str) -> dict[str, np.ndarray]:
    """HF-named float32 weights of tiny model `name`, the same on every call and every machine."""
    cfg = tiny_config(name)
    if name in ZOO:
        module = _zoo(name)
        return module.weights(cfg, Draw(module.SEED))
    rng = np.random.default_rng(_SEEDS[name])
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh

    def linear(out_f: int, in_f: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((out_f, in_f)) * gain / np.sqrt(in_f)).astype(np.float32)

    def norm(n: int) -> np.ndarray:  # away from 1 so a skipped or misplaced norm shows in the logits
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    # Embedding std 0.5 and a unit-RMS final norm give logits of std ~4: greedy picks have clear margins.
    w = {"model.embed_tokens.weight": (0.5 * rng.standard_normal((v, d))).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        # q/k gain 2 makes attention peaked, so positions (RoPE, window) matter to the output.
        w[p + "self_attn.q_proj.weight"] = linear(hq, d, 2.0)
        w[p + "self_attn.k_proj.weight"] = linear(hkv, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = linear(hkv, d)
        if name in ("qwen3", "gemma3"):  # qk-norm: one RMSNorm weight per head dimension, for every head
            w[p + "self_attn.q_norm.weight"] = QK_NORM_GAIN * norm(dh)
            w[p + "self_attn.k_norm.weight"] = QK_NORM_GAIN * norm(dh)
        if name == "qwen2":
            for proj, n in (("q_proj", hq), ("k_proj", hkv), ("v_proj", hkv)):
                w[p + f"self_attn.{proj}.bias"] = (0.3 * rng.standard_normal(n)).astype(np.float32)
        # Output projections with gain 2 let the layers outweigh the token's own embedding in the residual,
        # which otherwise makes a tied-embedding model repeat its input.
        w[p + "self_attn.o_proj.weight"] = linear(d, hq, 2.0)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        if name == "gemma3":  # sandwich norms around the MLP too
            w[p + "pre_feedforward_layernorm.weight"] = norm(d)
            w[p + "post_feedforward_layernorm.weight"] = norm(d)
        w[p + "mlp.gate_proj.weight"] = linear(f, d)
        w[p + "mlp.up_proj.weight"] = linear(f, d)
        w[p + "mlp.down_proj.weight"] = linear(d, f, 2.0)
    w["model.norm.weight"] = norm(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = linear(v, d, 4.0)
    if name == "gemma3":
        # Gemma multiplies the embeddings by sqrt(D) and ties them to the head: a table sqrt(D) smaller keeps
        # the residual stream at the other models' scale, and a final norm sqrt(D) larger their logits
        root = np.float32(np.sqrt(d))
        w["model.embed_tokens.weight"] = w["model.embed_tokens.weight"] / root
        w["model.norm.weight"] = w["model.norm.weight"] * root
        # its RMSNorm scales by 1 + w: store w so that the scales are the ones drawn above
        w = {k: a - np.float32(1.0) if k.endswith("norm.weight") else a for k, a in w.items()}
    return w


# ---- rounding to a storage dtype -----------------------------------------------------------------------


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even, as torch's .to(torch.bfloat16)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


# mixture-of-experts routers (Mixtral's block_sparse_moe.gate, Qwen2-MoE's shared_expert_gate, Granite-MoE's
# block_sparse_moe.router.layer, GPT-OSS's mlp.router) and GPT-OSS's 2-D expert biases: F32 in llama.cpp
_GGUF_F32_NAMES = re.compile(
    r"((\.gate|shared_expert_gate|\.router\.layer|\.router)\.weight|experts\.\w+[._]bias|conv1d\.weight|(mixer|mamba)\.(A|A_log|D|norm\.weight))$"
)


def gguf_keeps_f32(shape: tuple[int, ...], name: str = "") -> bool:
    """llama.cpp's converter keeps 1-D tensors (norms, biases), MoE routers (ffn_gate_inp, ffn_gate_inp_shexp) and
    Mamba's conv1d, A and D (ssm_conv1d, ssm_a, ssm_d) in F32 even in an F16 file."""
    return len(shape) <= 1 or bool(_GGUF_F32_NAMES.search(name))


def round_weights(weights: dict[str, np.ndarray], storage: str) -> dict[str, np.ndarray]:
    """The float32 values the weights have after a round trip through `storage` (one of STORAGES)."""
    if storage == "f32":
        return dict(weights)
    if storage == "f16":
        return {k: a.astype(np.float16).astype(np.float32) for k, a in weights.items()}
    if storage == "bf16":
        return {k: from_bf16_bits(to_bf16_bits(a)) for k, a in weights.items()}
    if storage == "gguf_f16":
        keep = {k for k, a in weights.items() if gguf_keeps_f32(a.shape, k)}
        return {k: a if k in keep else a.astype(np.float16).astype(np.float32) for k, a in weights.items()}
    raise ValueError(f"unknown storage {storage!r}; expected one of {STORAGES}")


def weights_digest(name: str, storage: str) -> str:
    """sha256 of the config and the rounded weights: a golden file records it, so a change here that was not
    followed by a rerun of make_reference.py is caught."""
    h = hashlib.sha256(json.dumps(tiny_config(name), sort_keys=True).encode())
    for key, a in sorted(round_weights(tiny_weights(name), storage).items()):
        h.update(key.encode() + a.tobytes())
    return h.hexdigest()


# ---- writers -------------------------------------------------------------------------------------------

_ST_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _encode(a: np.ndarray, dtype: str) -> bytes:
    if dtype == "bfloat16":
        return to_bf16_bits(a).tobytes()
    return np.ascontiguousarray(a, dtype=np.dtype(dtype)).tobytes()


def write_safetensors(name: str, directory: str | Path, dtype: str = "float32") -> Path:
    """config.json + model.safetensors of tiny model `name` in `directory`, tensors cast to `dtype`
    ("float32", "float16" or "bfloat16"). Written by hand so bf16 needs neither torch nor ml_dtypes."""
    if dtype not in _ST_DTYPES:
        raise ValueError(f"unknown safetensors dtype {dtype!r}; expected one of {tuple(_ST_DTYPES)}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(name) | {"torch_dtype": dtype}
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for key, a in sorted(tiny_weights(name).items()):
        blob = _encode(a, dtype)
        header[key] = {
            "dtype": _ST_DTYPES[dtype],
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data section starts 8-byte aligned, as the safetensors package does
    path = directory / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    return path


def write_gguf(name: str, path: str | Path, dtype: str = "F32") -> Path:
    """Tiny model `name` as a GGUF file ("F32" or "F16"), converted the way llama.cpp's converter does."""
    from tests.gguf_writer import write_gguf as write_hf_as_gguf

    return write_hf_as_gguf(Path(path), tiny_config(name), tiny_weights(name), dtype)
