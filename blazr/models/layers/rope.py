"""RoPE frequency tables, computed once at load as float32 numpy (the device `rope` op does the rotation).

Each function mirrors the same-named one in transformers' modeling_rope_utils and returns
(inv_freq (R/2,), attention_scaling); transformers multiplies cos and sin by attention_scaling.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError

Freqs = tuple[np.ndarray, float]  # (inv_freq (R/2,), attention_scaling)
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope", "freq_factors")


def rope_type(scaling: dict[str, Any] | None) -> str:
    """The rope type named by a config's rope_scaling dict ("type" is the older spelling)."""
    if not scaling:
        return "default"
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    return "longrope" if kind == "su" else kind  # "su": LongRoPE's first name in Phi-3 configs


def _base_inv_freq(theta: float, dim: int) -> np.ndarray:
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)  # (R/2,)
    return (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)


def _linear(theta: float, dim: int, scaling: dict, max_pos: int, seq_len: int | None) -> Freqs:
    return _base_inv_freq(theta, dim) / np.float32(scaling["factor"]), 1.0


def _dynamic(theta: float, dim: int, scaling: dict, max_pos: int, seq_len: int | None) -> Freqs:
    # NTK-aware: transformers recomputes this as the sequence grows; we fix it once for seq_len
    factor = scaling["factor"]
    seq_len = seq_len if seq_len is not None and seq_len > max_pos else max_pos
    base = theta * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return _base_inv_freq(base, dim), 1.0


def _llama3(theta: float, dim: int, scaling: dict, max_pos: int, seq_len: int | None) -> Freqs:
    inv_freq = _base_inv_freq(theta, dim)  # (R/2,)
    factor = scaling["factor"]
    low_freq_factor, high_freq_factor = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor

    wavelen = np.float32(2 * math.pi) / inv_freq  # (R/2,)
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / np.float32(factor), inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32), 1.0


def _freq_factors(theta: float, dim: int, scaling: dict, max_pos: int, seq_len: int | None):
    # GGUF carries llama3-style scaling as a rope_freqs tensor of per-frequency divisors (llama.cpp)
    factors = np.asarray(scaling["factors"], dtype=np.float32)  # (R/2,)
    return _base_inv_freq(theta, dim) / factors, 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention_factor(scaling: dict, factor: float) -> float:
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return _yarn_mscale(factor)


def _yarn(theta: float, dim: int, scaling: dict, max_pos: int, seq_len: int | None) -> Freqs:
    factor = scaling["factor"]
    original_max_pos = scaling.get("original_max_position_embeddings") or max_pos
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original_max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp

    pos_freqs = np.float32(theta) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))  # (R/2,)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)  # (R/2,)
    extrapolation = (1 - ramp).astype(np.float32)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq.astype(np.float32), _yarn_attention_factor(scaling, factor)


def _longrope(theta: float, dim: int, scaling: dict, max_pos: int, seq_len: int | None) -> Freqs:
    """Phi-3's LongRoPE: per-frequency divisors, `short_factor` for sequences up to
    original_max_position_embeddings and `long_factor` beyond (transformers' _compute_longrope_parameters).

    transformers switches tables when the sequence outgrows the original length (and recomputes the cache);
    a table fixed at load cannot, so the choice is llama.cpp's (llama_model::get_rope_factors): long when the
    context the model runs, `seq_len`, exceeds the original length. seq_len None means max_position_embeddings,
    the longest context blazr lets the model run, so any model extended past its original length gets the long
    factors at every position (as llama.cpp run at the full trained context), the only table valid for all of
    them."""
    orig = scaling.get("original_max_position_embeddings") or max_pos
    factors = {}
    for key in ("short_factor", "long_factor"):
        values = scaling.get(key)
        if values is None:
            raise UnsupportedError(f"rope_scaling type 'longrope' needs rope_scaling.{key}, which is missing")
        if len(values) != dim // 2:
            raise UnsupportedError(
                f"rope_scaling.{key} has {len(values)} values; LongRoPE needs one per rotated frequency, "
                f"{dim // 2} (rotary dims {dim} / 2)"
            )
        factors[key] = np.asarray(values, dtype=np.float32)  # (R/2,)
    # Phi-3 configs give no factor: the extension ratio is max_position_embeddings / original
    factor = scaling.get("factor")
    factor = max_pos / orig if factor is None else factor
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    seq_len = max_pos if seq_len is None else seq_len
    ext = factors["long_factor" if seq_len > orig else "short_factor"]  # (R/2,)
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)  # (R/2,)
    # 1 / (ext * theta ** (2i / R)), rounded in float32 in transformers' order
    inv_freq = np.float32(1.0) / (ext * (np.float32(theta) ** exponents))
    return inv_freq.astype(np.float32), float(attention_factor)


_ROPE_FUNCTIONS = {
    "default": None,
    "linear": _linear,
    "dynamic": _dynamic,
    "llama3": _llama3,
    "yarn": _yarn,
    "longrope": _longrope,
    "freq_factors": _freq_factors,
}


def rope_parameters(
    rot_dim: int,
    theta: float,
    scaling: dict[str, Any] | None = None,
    max_position_embeddings: int = 2048,
    seq_len: int | None = None,
) -> Freqs:
    """inv_freq (rot_dim/2,) float32 and the attention scaling for a config's rope settings.

    seq_len is the longest context the model will run (fixed at load; None: max_position_embeddings). It
    matters for "dynamic" (the base grows for it) and "longrope" (long factors when it exceeds the original
    length).
    """
    kind = rope_type(scaling)
    if kind not in _ROPE_FUNCTIONS:
        supported = ", ".join(ROPE_TYPES)
        raise UnsupportedError(f"rope_scaling type {kind!r} is not supported; supported: {supported}")
    if kind == "default":
        return _base_inv_freq(theta, rot_dim), 1.0
    compute = _ROPE_FUNCTIONS[kind]
    inv_freq, attention_scaling = compute(theta, rot_dim, scaling, max_position_embeddings, seq_len)
    return inv_freq.astype(np.float32), float(attention_scaling)


def device_rope(backend, rot_dim: int, theta: float, scaling=None, max_position_embeddings: int = 2048):
    """(inv_freq (R/2,) on the device, attention scaling): kept in float32 whatever the compute dtype."""
    inv_freq, attention_scaling = rope_parameters(rot_dim, theta, scaling, max_position_embeddings)
    return backend.upload(inv_freq, "f32"), attention_scaling


def theta_and_scaling(theta: float, scaling: dict[str, Any] | None, parameters: dict[str, Any] | None):
    """(theta, scaling) from a config that may use transformers v5's rope_parameters (theta and scaling in one
    dict); an explicit rope_scaling wins over the one rope_parameters implies."""
    if parameters:
        theta = parameters.get("rope_theta", theta)
        if scaling is None and rope_type(parameters) != "default":
            scaling = parameters
    return theta, scaling
