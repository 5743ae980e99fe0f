"""Piper voices: a VITS network exported to ONNX (`<voice>.onnx`) plus its `<voice>.onnx.json` config.

blazr does not run the ONNX graph. It reads the graph's initializers (the `onnx` package) and names each one
after the PyTorch module it came from (Piper's `vits` training code, the names blazr.models.vits declares).
Most initializers keep those names; the exporter renamed a few, found here from the node that reads them:

* weight-normalised convolutions are folded into plain weights named `onnx::Conv_<n>`: named from their Conv
  node (`/flow/flows.0/enc/in_layers.0/Conv` -> `flow.flows.0.enc.in_layers.0.weight`);
* the phoneme embedding is `sid`, read by `/enc_p/emb/Gather` -> `enc_p.emb.weight`;
* the duration predictor's first flow keeps `m` but its `logs` became the constant exp(-logs)
  (`/dp/flows.0/Exp_output_0`) -> `dp.flows.0.logs` = -log of it.

The graph's Conv / ConvTranspose attributes (strides, paddings, dilations) are returned beside the weights:
the decoder's upsampling rates and the resblocks' dilations are not recoverable from weight shapes alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, ModelNotFoundError, UnsupportedError


@dataclass
class PiperVoice:
    """What a Piper voice file holds, in blazr's terms."""

    path: Path  # the .onnx file
    config: dict[str, Any]  # the .onnx.json
    weights: dict[str, np.ndarray]  # module-path name -> float32 array
    conv_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)  # weight name -> Conv attributes


def find_piper_onnx(path: str | Path) -> Path:
    """The `.onnx` file of a voice given as the file itself or its directory (which must hold one)."""
    path = Path(path)
    if not path.exists():
        raise ModelNotFoundError(f"{path}: no such file or directory")
    if path.is_file():
        if path.name.endswith(".onnx.json"):
            path = path.with_name(path.name[: -len(".json")])
        return path
    found = sorted(path.glob("*.onnx"))
    if len(found) != 1:
        what = (
            "no .onnx file" if not found else f"{len(found)} .onnx files ({', '.join(p.name for p in found)})"
        )
        raise UnsupportedError(
            f"{path}: a Piper voice directory holds one .onnx file with its .onnx.json; found {what}"
        )
    return found[0]


def is_piper_voice(path: str | Path) -> bool:
    """Whether `path` (a file or directory) is a Piper voice: an .onnx with a Piper .onnx.json beside it."""
    try:
        onnx_path = find_piper_onnx(path)
    except (ModelNotFoundError, UnsupportedError):
        return False
    config = onnx_path.with_name(onnx_path.name + ".json")
    if onnx_path.suffix != ".onnx" or not config.is_file():
        return False
    try:
        return "phoneme_id_map" in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def read_piper_voice(path: str | Path) -> PiperVoice:
    """Read a Piper voice (its .onnx file or directory). CheckpointError names a broken file."""
    onnx_path = find_piper_onnx(path)
    config_path = onnx_path.with_name(onnx_path.name + ".json")
    if not config_path.is_file():
        raise CheckpointError(f"{onnx_path}: the voice's config {config_path.name} is missing beside it")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CheckpointError(f"{config_path}: not valid JSON ({e})") from None
    for key in ("phoneme_id_map", "audio"):
        if key not in config:
            raise CheckpointError(f"{config_path}: not a Piper voice config (no {key!r})")
    weights, attrs = _read_initializers(onnx_path)
    return PiperVoice(onnx_path, config, weights, attrs)


def _read_initializers(onnx_path: Path) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
    import onnx

    try:
        graph = onnx.load(str(onnx_path)).graph
    except Exception as e:  # onnx raises DecodeError and others for a truncated or foreign file
        raise CheckpointError(f"{onnx_path}: not a readable ONNX file ({type(e).__name__}: {e})") from None
    raw = {init.name: init for init in graph.initializer}
    weights: dict[str, np.ndarray] = {}
    attrs: dict[str, dict[str, Any]] = {}
    for node in graph.node:
        module = (
            node.name.strip("/").rsplit("/", 1)[0].replace("/", ".")
        )  # "/dec/ups.0/ConvTranspose" -> dec.ups.0
        if node.op_type in ("Conv", "ConvTranspose"):
            for role, name in zip(("weight", "bias"), node.input[1:], strict=False):
                if name in raw:
                    weights[f"{module}.{role}"] = _array(raw[name])
            attrs[f"{module}.weight"] = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        elif node.op_type == "Gather" and node.name == "/enc_p/emb/Gather" and node.input[0] in raw:
            weights["enc_p.emb.weight"] = _array(raw[node.input[0]])
    for name, init in raw.items():
        if name.endswith(
            (".gamma", ".beta", ".m", ".logs", "emb_rel_k", "emb_rel_v")
        ) and not name.startswith("/"):
            weights[name] = _array(init)
        elif name.startswith("/dp/flows.") and name.endswith("/Exp_output_0"):
            flow = name.split("/")[2]  # "flows.0"
            weights[f"dp.{flow}.logs"] = -np.log(_array(init))  # the export stored exp(-logs)
        elif name.startswith(("emb_g", "enc_p.emb")):
            weights[name.replace("emb_g", "emb_g.weight") if name == "emb_g" else name] = _array(init)
    if "enc_p.emb.weight" not in weights:
        raise CheckpointError(
            f"{onnx_path}: no phoneme embedding (/enc_p/emb/Gather): not a Piper VITS export"
        )
    return weights, attrs


def _array(init) -> np.ndarray:
    from onnx import numpy_helper

    a = numpy_helper.to_array(init)
    if a.dtype.kind != "f":
        raise CheckpointError(f"initializer {init.name!r} has dtype {a.dtype}, expected float")
    return np.ascontiguousarray(a, dtype=np.float32)


def vits_config(voice: PiperVoice) -> dict[str, Any]:
    """The voice's network shape as transformers' VitsConfig keys (blazr.models.vits.ModelArgs), read from
    weight shapes and the graph's convolution attributes."""
    w, attrs = voice.weights, voice.conv_attrs
    if int(voice.config.get("num_speakers", 1)) > 1 or any(k.startswith("emb_g") for k in w):
        raise UnsupportedError(f"{voice.path}: multi-speaker Piper voices are not supported yet")

    def count(fmt: str) -> int:
        n = 0
        while fmt.format(n) in w:
            n += 1
        return n

    try:
        rel = w["enc_p.encoder.attn_layers.0.emb_rel_k"]  # (1, 2W + 1, Dh)
        hidden = w["enc_p.emb.weight"].shape[1]
        ffn_dim, _, ffn_kernel = w["enc_p.encoder.ffn_layers.0.conv_1.weight"].shape
        ups = count("dec.ups.{}.weight")
        kind = "2" if "dec.resblocks.0.convs.0.weight" in w else "1"
        dilated = "convs" if kind == "2" else "convs1"
        per_stage = count("dec.resblocks.{}." + dilated + ".0.weight") // ups
        dp_flows = max(int(k.split(".")[2]) for k in w if k.startswith("dp.flows.")) // 2 + 1
        wn_layers = count("flow.flows.0.enc.in_layers.{}.weight")
        return {
            "vocab_size": w["enc_p.emb.weight"].shape[0],
            "hidden_size": hidden,
            "flow_size": w["enc_p.proj.weight"].shape[0] // 2,
            "num_hidden_layers": count("enc_p.encoder.attn_layers.{}.conv_q.weight"),
            "num_attention_heads": hidden // rel.shape[-1],
            "window_size": (rel.shape[-2] - 1) // 2,
            "ffn_dim": ffn_dim,
            "ffn_kernel_size": ffn_kernel,
            "duration_predictor_kernel_size": w["dp.convs.convs_sep.0.weight"].shape[-1],
            "duration_predictor_num_flows": dp_flows,
            "prior_encoder_num_flows": _even_flows(w),
            "prior_encoder_num_wavenet_layers": wn_layers,
            "wavenet_kernel_size": w["flow.flows.0.enc.in_layers.0.weight"].shape[-1],
            "wavenet_dilation_rate": attrs["flow.flows.0.enc.in_layers.1.weight"]["dilations"][0]
            if wn_layers > 1
            else 1,
            "upsample_initial_channel": w["dec.conv_pre.weight"].shape[0],
            "upsample_rates": [attrs[f"dec.ups.{i}.weight"]["strides"][0] for i in range(ups)],
            "upsample_kernel_sizes": [w[f"dec.ups.{i}.weight"].shape[-1] for i in range(ups)],
            "resblock": kind,
            "resblock_kernel_sizes": [
                w[f"dec.resblocks.{j}.{dilated}.0.weight"].shape[-1] for j in range(per_stage)
            ],
            "resblock_dilation_sizes": [
                [
                    attrs[f"dec.resblocks.{j}.{dilated}.{i}.weight"]["dilations"][0]
                    for i in range(count(f"dec.resblocks.{j}.{dilated}.{{}}.weight"))
                ]
                for j in range(per_stage)
            ],
            "sampling_rate": int(voice.config["audio"]["sample_rate"]),
        }
    except (KeyError, IndexError, ValueError) as e:
        raise CheckpointError(f"{voice.path}: not a VITS voice blazr reads (missing {e})") from None


def _even_flows(w: dict[str, np.ndarray]) -> int:
    """Coupling layers of the flow: stored at even indices (a Flip, without weights, at each odd one)."""
    n = 0
    while f"flow.flows.{2 * n}.pre.weight" in w:
        n += 1
    return n
