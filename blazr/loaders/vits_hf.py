"""Hugging Face VitsModel checkpoints (MMS-TTS and others): a directory with config.json (model_type "vits"),
model.safetensors and the character tokenizer's vocab.json (+ tokenizer_config.json).

transformers' modules hold the same network as VITS's training code under other names and layouts; this
module renames every tensor to the training code's names (the ones blazr.models.vits declares, as Piper's
exports keep them) and folds weight normalisation:

* text_encoder -> enc_p: `layers.{i}.attention.{q,k,v,out}_proj` (Linear) -> `attn_layers.{i}.conv_{q,k,v,o}`
  (1x1 convolutions there: the same matrix), `layer_norm` / `final_layer_norm` -> `norm_layers_{1,2}`,
  `feed_forward` -> `ffn_layers`, `embed_tokens` -> `emb`, `project` -> `proj`.
* flow: transformers keeps only the coupling layers (its flips have no module); VITS interleaves a Flip
  after each, so coupling i is `flow.flows.{2i}`. `conv_pre`/`wavenet`/`conv_post` -> `pre`/`enc`/`post`.
* duration_predictor -> dp: the stochastic predictor's flows are [affine, ConvFlow x n] without flips;
  VITS's are [affine, (ConvFlow, Flip) x n], so ConvFlow j (j >= 1) is `dp.flows.{2j - 1}`. The affine's
  `translate`/`log_scale` are VITS's `m`/`logs`; `conv_pre`/`conv_dds`/`conv_proj` -> `pre`/`convs`/`proj`,
  `convs_dilated`/`convs_pointwise` -> `convs_sep`/`convs_1x1`. The deterministic predictor keeps VITS's names.
* decoder -> dec (`upsampler` -> `ups`), embed_speaker -> emb_g.

Dropped, being used only in training: the posterior encoder (it encodes the target spectrogram into the
latent the flow is trained on; inference samples the prior instead), the stochastic predictor's `post_*`
modules (its variational posterior over durations) and its first ConvFlow (`flows.1`, which VITS's reverse
pass skips: the "useless vflow").
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, UnsupportedError

WEIGHTS_FILE = "model.safetensors"

# (pattern, replacement) applied in order to each name, after weight-norm folding
_RENAMES = [
    (r"^text_encoder\.embed_tokens\.", "enc_p.emb."),
    (r"^text_encoder\.project\.", "enc_p.proj."),
    (
        r"^text_encoder\.encoder\.layers\.(\d+)\.attention\.([qkv])_proj\.",
        r"enc_p.encoder.attn_layers.\1.conv_\2.",
    ),
    (
        r"^text_encoder\.encoder\.layers\.(\d+)\.attention\.out_proj\.",
        r"enc_p.encoder.attn_layers.\1.conv_o.",
    ),
    (
        r"^text_encoder\.encoder\.layers\.(\d+)\.attention\.(emb_rel_[kv])$",
        r"enc_p.encoder.attn_layers.\1.\2",
    ),
    (r"^text_encoder\.encoder\.layers\.(\d+)\.feed_forward\.", r"enc_p.encoder.ffn_layers.\1."),
    (r"^text_encoder\.encoder\.layers\.(\d+)\.layer_norm\.", r"enc_p.encoder.norm_layers_1.\1."),
    (r"^text_encoder\.encoder\.layers\.(\d+)\.final_layer_norm\.", r"enc_p.encoder.norm_layers_2.\1."),
    (r"^flow\.flows\.(\d+)\.", lambda m: f"flow.flows.{2 * int(m[1])}."),
    (r"^duration_predictor\.flows\.0\.translate$", "dp.flows.0.m"),
    (r"^duration_predictor\.flows\.0\.log_scale$", "dp.flows.0.logs"),
    (r"^duration_predictor\.flows\.(\d+)\.", lambda m: f"dp.flows.{2 * int(m[1]) - 1}."),
    (r"^duration_predictor\.", "dp."),
    (r"^decoder\.upsampler\.", "dec.ups."),
    (r"^decoder\.", "dec."),
    (r"^embed_speaker\.", "emb_g."),
    (r"\.conv_pre\.", ".pre."),
    (r"\.conv_post\.", ".post."),
    (r"\.conv_proj\.", ".proj."),
    (r"\.conv_dds\.", ".convs."),
    (r"\.wavenet\.", ".enc."),
    (r"\.convs_dilated\.", ".convs_sep."),
    (r"\.convs_pointwise\.", ".convs_1x1."),
]
_COMPILED = [(re.compile(p), r) for p, r in _RENAMES]
# training-only tensors (module docstring)
_DROPPED = re.compile(r"^posterior_encoder\.|^duration_predictor\.(post_|flows\.1\.)")
# HiFi-GAN modules keep their names in VITS ("conv_pre"/"conv_post" of the decoder): only renamed elsewhere
_DEC_KEEP = ("dec.conv_pre.", "dec.conv_post.")


def is_hf_vits(path: str | Path) -> bool:
    """Whether `path` is a directory holding a transformers VitsModel (config.json model_type "vits" and
    model.safetensors)."""
    path = Path(path)
    config = path / "config.json"
    if not (path.is_dir() and config.is_file() and (path / WEIGHTS_FILE).is_file()):
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "vits"
    except (OSError, ValueError, AttributeError):
        return False


def read_hf_vits(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(config for blazr.models.vits.ModelArgs, weights under VITS's training names) of a VitsModel
    directory. CheckpointError names a broken file; UnsupportedError a variant blazr does not run."""
    from blazr.loaders.safetensors import read_config, read_safetensors_file

    path = Path(path)
    config = read_config(path)
    if config.get("model_type") != "vits":
        raise CheckpointError(f"{path}/config.json: model_type is {config.get('model_type')!r}, not 'vits'")
    tensors = read_safetensors_file(path / WEIGHTS_FILE)
    raw = {name: np.asarray(t.load(), dtype=np.float32) for name, t in tensors.items()}
    return vits_hf_config(config, path), rename_weights(raw, config)


def vits_hf_config(config: dict[str, Any], path: Path | str = "") -> dict[str, Any]:
    """VitsConfig keys as blazr's ModelArgs reads them (the same names), checked for what blazr runs."""
    out = dict(config)
    if config.get("hidden_act", "relu") != "relu":
        raise UnsupportedError(f"{path}: text encoder activation {config['hidden_act']!r} (blazr runs relu)")
    if not config.get("window_size", 4):
        raise UnsupportedError(
            f"{path}: attention without relative positions (window_size 0) is not supported"
        )
    if config.get("depth_separable_channels", 2) != 2:
        raise UnsupportedError(f"{path}: depth_separable_channels must be 2 (VITS's duration flows)")
    out["resblock"] = "1"  # transformers' HiFi-GAN has only HiFi-GAN's first residual block kind
    for key in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
        if key in out:
            out[key] = [int(v) for v in out[key]]
    if "resblock_dilation_sizes" in out:
        out["resblock_dilation_sizes"] = [[int(d) for d in ds] for ds in out["resblock_dilation_sizes"]]
    if int(config.get("num_speakers", 1)) <= 1:
        out["speaker_embedding_size"] = 0  # transformers ignores it then: no speaker conditioning
    return out


def rename_weights(raw: dict[str, np.ndarray], config: dict[str, Any]) -> dict[str, np.ndarray]:
    """transformers' names -> VITS's, weight norm folded, training-only tensors dropped."""
    folded = fold_weight_norm(raw)
    out: dict[str, np.ndarray] = {}
    for name, w in folded.items():
        if _DROPPED.search(name):
            continue
        new = name
        for pattern, repl in _COMPILED:
            if new.startswith(_DEC_KEEP) and pattern.pattern in (r"\.conv_pre\.", r"\.conv_post\."):
                continue
            new = pattern.sub(repl, new)
        out[new] = w
    if not config.get("use_bias", True):  # the attention's projections without biases: zero ones
        width = int(config.get("hidden_size", 192))
        for i in range(int(config.get("num_hidden_layers", 6))):
            for proj in "qkvo":
                out.setdefault(f"enc_p.encoder.attn_layers.{i}.conv_{proj}.bias", np.zeros(width, np.float32))
    return out


def fold_weight_norm(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """w = g * v / ||v|| for each weight-normalised tensor, stored by transformers either as a
    parametrization (`X.parametrizations.weight.original0` = g, `original1` = v) or in the older
    `X.weight_g` / `X.weight_v` form. The norm runs over every axis but the one g keeps (dim 0 here: each
    output channel of a convolution, each input channel of a transposed one)."""
    out: dict[str, np.ndarray] = {}
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for name, w in raw.items():
        for g_suffix, v_suffix in (
            (".parametrizations.weight.original0", ".parametrizations.weight.original1"),
            (".weight_g", ".weight_v"),
        ):
            if name.endswith((g_suffix, v_suffix)):
                base = name[: -len(g_suffix if name.endswith(g_suffix) else v_suffix)]
                pairs.setdefault(base, {})["g" if name.endswith(g_suffix) else "v"] = w
                break
        else:
            out[name] = w
    for base, gv in pairs.items():
        if set(gv) != {"g", "v"}:
            raise CheckpointError(f"weight-normalised {base!r} lacks its {'v' if 'g' in gv else 'g'} half")
        g, v = gv["g"], gv["v"]
        # the axes g has size 1 on (an axis of size 1 in v too is harmless to sum over)
        axes = tuple(ax for ax in range(v.ndim) if g.shape[ax] == 1) if g.ndim == v.ndim else None
        norm = np.sqrt(np.sum(v.astype(np.float64) ** 2, axis=axes, keepdims=True))
        out[base + ".weight"] = (g.astype(np.float64) * v / norm).astype(np.float32)
    return out
