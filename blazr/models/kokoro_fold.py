"""Load-time folds of Kokoro's checkpoint (called by kokoro.sanitize): each turns tensors that the training
code keeps apart into the one array a layer of kokoro_blocks.py reads. Host numpy, float64 inside."""

from __future__ import annotations

import re

import numpy as np

_ADAIN = re.compile(r"(.*\.(?:norm1|norm2|adain1\.\d+|adain2\.\d+))\.fc\.weight$")
_ADALN = re.compile(r"(.*\.lstms\.\d+)\.fc\.bias$")


def fold_lstm(w: dict[str, np.ndarray], prefix: str, hidden: int, style: int) -> dict[str, np.ndarray]:
    """nn.LSTM's per-direction tensors -> w_ih (8H, I) (forward rows, then backward), bias (8H,) (b_ih +
    b_hh), w_hh (2, 4H, H); an input of width hidden + style loses its last `style` columns to w_style."""
    parts = {}
    for suffix in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        parts[suffix] = [w.pop(f"{prefix}.{suffix}"), w.pop(f"{prefix}.{suffix}_reverse")]
    w_ih = np.concatenate(parts["weight_ih_l0"], axis=0)  # (8H, D)
    bias = np.concatenate([a + b for a, b in zip(parts["bias_ih_l0"], parts["bias_hh_l0"], strict=True)])
    out = {f"{prefix}.bias": bias, f"{prefix}.w_hh": np.stack(parts["weight_hh_l0"])}
    if w_ih.shape[1] == hidden + style:  # the input was [features, style]
        out |= {f"{prefix}.w_ih": w_ih[:, :hidden].copy(), f"{prefix}.w_style": w_ih[:, hidden:].copy()}
    else:
        out[f"{prefix}.w_ih"] = w_ih
    return out


def fold_adain(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """AdaIN1d: (1 + gamma) * (norm(x) * n_w + n_b) + beta with [gamma; beta] = fc(s) becomes norm(x) * scale
    + shift with [scale; shift] = affine(s): scale rows n_w * W_gamma, bias (1 + b_gamma) n_w; shift rows
    n_b * W_gamma + W_beta, bias (1 + b_gamma) n_b + b_beta. The InstanceNorm affine (n_w, n_b) is absent
    from Kokoro-82M's file (trained without it): 1 and 0 then. AdaLayerNorm: the 1 of 1 + gamma joins fc's
    bias."""
    out = dict(w)
    for name in [n for n in w if _ADAIN.match(n)]:
        p = _ADAIN.match(name).group(1)
        fc_w, fc_b = out.pop(f"{p}.fc.weight").astype(np.float64), out.pop(f"{p}.fc.bias").astype(np.float64)
        c = fc_w.shape[0] // 2
        n_w = out.pop(f"{p}.norm.weight", np.ones(c)).astype(np.float64)
        n_b = out.pop(f"{p}.norm.bias", np.zeros(c)).astype(np.float64)
        g_w, g_b, b_w, b_b = fc_w[:c], fc_b[:c] + 1.0, fc_w[c:], fc_b[c:]
        weight = np.concatenate([n_w[:, None] * g_w, n_b[:, None] * g_w + b_w])  # (2C, S)
        bias = np.concatenate([g_b * n_w, g_b * n_b + b_b])  # (2C,)
        out[f"{p}.affine.weight"], out[f"{p}.affine.bias"] = (
            weight.astype(np.float32),
            bias.astype(np.float32),
        )
    for name in [n for n in out if _ADALN.match(n)]:
        b = out[name].astype(np.float64)
        b[: len(b) // 2] += 1.0
        out[name] = b.astype(np.float32)
    return out


def generated(w: dict[str, np.ndarray], args) -> dict[str, np.ndarray]:
    """Arrays the layers read that no checkpoint stores: the Hann window, the ones of the nearest x2
    upsampling, and Snake's alphas (1, C, 1) flattened."""
    n_fft = int(args.istftnet["gen_istft_n_fft"])
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)  # torch.hann_window(periodic=True)
    out = {"decoder.generator.window": window.astype(np.float32)}
    for name, value in w.items():
        if name.endswith(".pool.weight"):
            out[name.removesuffix("pool.weight") + "repeat2"] = np.ones((value.shape[0], 1, 2), np.float32)
        elif re.search(r"\.alpha[12]\.\d+$", name):
            out[name] = value.reshape(-1)
    return out
