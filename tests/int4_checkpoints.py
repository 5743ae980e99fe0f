"""Tiny AWQ and GPTQ int4 SafeTensors checkpoints, made with numpy: known float weights are quantized per
group and packed exactly as each format's published code does (AutoAWQ WQLinear_GEMM.from_linear, AutoGPTQ
QuantLinear.pack), written independently of blazr's unpacking so a layout mistake on either side shows.

`write_int4_checkpoint` returns the float32 weights the checkpoint stands for: every quantized layer as
(q - z) * s computed in float64 (exact in float32), the rest as given. Those are the reference for the
dequantized weights, the matmuls and the dense model the int4 one is compared with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from tests.tiny_models import tiny_config

QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's order_map: nibble i of a word holds column 8c + order[i]


@dataclass
class Int4Layer:
    """w[n, k] = (q[k, n] - zeros[groups[k], n]) * scales[groups[k], n], as both formats define it."""

    q: np.ndarray  # (K, N) int64 in 0..15
    zeros: np.ndarray  # (G, N) int64
    scales: np.ndarray  # (G, N) float16
    groups: np.ndarray  # (K,) int64

    def dense(self) -> np.ndarray:
        """(N, K) float32, computed in float64: every value is exact in float32."""
        w = (self.q - self.zeros[self.groups]) * self.scales[self.groups].astype(np.float64)  # (K, N)
        return np.ascontiguousarray(w.T.astype(np.float32))


def group_index(k: int, group: int, act_order: bool, rng) -> np.ndarray:
    """Each input's group: runs of `group` (-1: one group), or with act-order groups of a random order of
    the inputs, as AutoGPTQ's desc_act makes them (g_idx[perm[i]] = i // group)."""
    group = k if group == -1 else group
    if not act_order:
        return np.arange(k) // group
    perm = rng.permutation(k)
    groups = np.empty(k, dtype=np.int64)
    groups[perm] = np.arange(k) // group
    return groups


def quantize(w: np.ndarray, groups: np.ndarray, sym: bool, min_zero: int = 0) -> Int4Layer:
    """Min/max round-to-nearest int4 of w (N, K) per (group, output), as AutoGPTQ's Quantizer: asymmetric
    scale (max - min) / 15 and zero round(-min / scale), clamped to min_zero..15; symmetric zero 8."""
    n_groups = int(groups.max()) + 1
    scales = np.empty((n_groups, w.shape[0]), dtype=np.float16)
    zeros = np.empty((n_groups, w.shape[0]), dtype=np.int64)
    for g in range(n_groups):
        cols = w[:, groups == g].astype(np.float64)  # (N, members)
        lo, hi = np.minimum(cols.min(axis=1), 0.0), np.maximum(cols.max(axis=1), 0.0)
        if sym:
            hi = np.maximum(-lo, hi)
            lo = -hi
        scales[g] = np.maximum((hi - lo) / 15, 1e-4)
        zeros[g] = 8 if sym else np.clip(np.round(-lo / scales[g].astype(np.float64)), min_zero, 15)
    s, z = scales[groups].astype(np.float64), zeros[groups]  # (K, N)
    q = np.clip(np.round(w.T / s) + z, 0, 15).astype(np.int64)  # (K, N)
    return Int4Layer(q, zeros, scales, groups)


# ---- packing ---------------------------------------------------------------------------------------------


def pack_awq(layer: Int4Layer) -> dict[str, np.ndarray]:
    """AutoAWQ GEMM: qweight (K, N/8) and qzeros (G, N/8) packed along N in AWQ_ORDER, scales (G, N)."""

    def along_n(values: np.ndarray) -> np.ndarray:  # (R, N) -> (R, N/8) int32
        packed = np.zeros((values.shape[0], values.shape[1] // 8), dtype=np.uint32)
        for col in range(packed.shape[1]):
            for i in range(8):
                packed[:, col] |= values[:, col * 8 + AWQ_ORDER[i]].astype(np.uint32) << np.uint32(4 * i)
        return packed.view(np.int32)

    return {"qweight": along_n(layer.q), "qzeros": along_n(layer.zeros), "scales": layer.scales}


def pack_gptq(layer: Int4Layer, v1: bool = True, zeros: bool = True) -> dict[str, np.ndarray]:
    """AutoGPTQ: qweight (K/8, N) packed along K in order, qzeros (G, N/8) along N in order holding z - 1
    (the "gptq" checkpoint format; "gptq_v2" holds z), scales (G, N), g_idx (K,) int32."""
    k, n = layer.q.shape
    qweight = np.zeros((k // 8, n), dtype=np.uint32)
    for row in range(k // 8):
        for j in range(8):
            qweight[row] |= layer.q[row * 8 + j].astype(np.uint32) << np.uint32(4 * j)
    stored = layer.zeros - 1 if v1 else layer.zeros
    assert stored.min() >= 0, "the classic GPTQ format cannot store a zero point of 0"
    qzeros = np.zeros((stored.shape[0], n // 8), dtype=np.uint32)
    for col in range(n // 8):
        for j in range(8):
            qzeros[:, col] |= stored[:, col * 8 + j].astype(np.uint32) << np.uint32(4 * j)
    out = {"qweight": qweight.view(np.int32), "scales": layer.scales, "g_idx": layer.groups.astype(np.int32)}
    if zeros:
        out["qzeros"] = qzeros.view(np.int32)
    return out


# ---- checkpoints ---------------------------------------------------------------------------------------


def wide_config(name: str) -> dict:
    """tiny_config(name) with every K a multiple of 128 (hidden 128, FFN 256), so groups of 128 fit."""
    return tiny_config(name) | {"hidden_size": 128, "intermediate_size": 256, "head_dim": 32}


def random_weights(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    """HF-named float32 weights for cfg, scaled as tests/tiny_models.py does (clear greedy margins)."""
    rng = np.random.default_rng(seed)
    d, f, v, dh = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"] * dh, cfg["num_key_value_heads"] * dh

    def linear(out_f: int, in_f: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((out_f, in_f)) * gain / np.sqrt(in_f)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": (0.5 * rng.standard_normal((v, d))).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        for proj, n, gain in (("q_proj", hq, 2.0), ("k_proj", hkv, 2.0), ("v_proj", hkv, 1.0)):
            w[p + f"self_attn.{proj}.weight"] = linear(n, d, gain)
            if cfg["model_type"] == "qwen2":
                w[p + f"self_attn.{proj}.bias"] = (0.3 * rng.standard_normal(n)).astype(np.float32)
        w[p + "self_attn.o_proj.weight"] = linear(d, hq, 2.0)
        w[p + "mlp.gate_proj.weight"] = linear(f, d)
        w[p + "mlp.up_proj.weight"] = linear(f, d)
        w[p + "mlp.down_proj.weight"] = linear(d, f, 2.0)
    w["model.norm.weight"] = norm(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = linear(v, d, 4.0)
    return w


def quant_settings(method: str, group: int, sym: bool, act_order: bool, v1: bool) -> dict:
    if method == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
    settings = {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": act_order, "sym": sym}
    return settings | {"checkpoint_format": "gptq" if v1 else "gptq_v2"}


def write_int4_checkpoint(
    directory: Path,
    cfg: dict,
    weights: dict[str, np.ndarray],
    method: str,
    group: int,
    sym: bool = False,
    act_order: bool = False,
    v1: bool = True,
    settings_file: str = "config.json",
    seed: int = 7,
) -> dict[str, np.ndarray]:
    """config.json (+ settings_file) + model.safetensors of an AWQ or GPTQ checkpoint of `weights`; returns
    the float32 weights it stands for (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    settings = quant_settings(method, group, sym, act_order, v1)
    config = cfg | ({"quantization_config": settings} if settings_file == "config.json" else {})
    (directory / "config.json").write_text(json.dumps(config))
    if settings_file != "config.json":
        (directory / settings_file).write_text(json.dumps(settings))
    tensors, reference = {}, {}
    for name, w in weights.items():
        prefix = name.removesuffix(".weight")
        if prefix.rsplit(".", 1)[-1] not in QUANTIZED:
            tensors[name] = reference[name] = w
            continue
        groups = group_index(w.shape[1], group, act_order and method == "gptq", rng)
        layer = quantize(w, groups, sym, min_zero=1 if method == "gptq" and v1 else 0)
        packed = pack_awq(layer) if method == "awq" else pack_gptq(layer, v1)
        tensors |= {f"{prefix}.{part}": a for part, a in packed.items()}
        reference[name] = layer.dense()
    save_file(tensors, str(directory / "model.safetensors"))
    return reference


def write_dense_checkpoint(directory: Path, cfg: dict, weights: dict[str, np.ndarray]) -> Path:
    """The same model as plain float32 SafeTensors (no quantization_config)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg))
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(directory / "model.safetensors"))
    return directory
