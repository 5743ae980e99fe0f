"""Kokoro-82M exported to ONNX with dynamic int8 quantization (kokoro-onnx's `kokoro-v1.0.int8.onnx`):
its initializers dequantized back into KModel's state dict, which blazr/models/kokoro.py then runs in float.

blazr does not run the ONNX graph; it reads the weights (the `onnx` package) and names each one from the
node that consumes it, whose name is the PyTorch module path (`/decoder/decoder/decode.0/conv1/Conv_quant`
-> `decoder.decode.0.conv1.weight`). What the export changed:
  * MatMulInteger weights (Linear, AdaIN fc): (in, out) uint8/int8 with per-output-column scale and zero point,
    the scale found on the `<node>_scales_mul` node: w = ((q - zp) * scale).T;
  * ConvInteger weights: weight norm already folded (`.../Mul_output_0`), one scale and zero point per tensor;
  * Conv / ConvTranspose weights left in float (the generator's upsamplers, conv_post, the pools);
  * DynamicQuantizeLSTM: W (2, I, 4H), R (2, H, 4H) per-direction int8, B (2, 8H), ONNX gate order i, o, f, c
    (PyTorch's is i, f, g, o);
  * embeddings: Gather of int8 rows and a DequantizeLinear;
  * every other float tensor keeps its PyTorch name under `encoder.` / `decoder.decoder.`.
The ONNX file holds no config: KOKORO_82M is Kokoro-82M v1.0's published config.json (the vocab comes with the
voices); the strict shape check at load catches a file of other sizes.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from blazr.errors import CheckpointError

KOKORO_82M = {
    "n_token": 178,
    "hidden_dim": 512,
    "style_dim": 128,
    "n_layer": 3,
    "max_dur": 50,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "embedding_size": 128,
    },
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11],
        "upsample_initial_channel": 512,
    },
}
_PREFIXES = (  # ONNX module path -> KModel name (the predictor's F0/N branches ran outside its forward)
    ("/decoder/decoder/", "decoder."),
    ("/encoder/bert_encoder/", "bert_encoder."),
    ("/encoder/bert/", "bert."),
    ("/encoder/text_encoder/", "text_encoder."),
    ("/encoder/predictor/", "predictor."),
    ("/encoder/shared/", "predictor.shared."),
    ("/encoder/F0", "predictor.F0"),
    ("/encoder/N", "predictor.N"),
)
_IOFC_TO_IFGO = (0, 2, 3, 1)  # PyTorch gate k is ONNX gate _IOFC_TO_IFGO[k]


def module_name(node_name: str) -> str | None:
    """`/decoder/decoder/asr_res/asr_res.0/Conv_quant` -> `decoder.asr_res.0`; None outside the model."""
    for onnx_prefix, torch_prefix in _PREFIXES:
        if node_name.startswith(onnx_prefix):
            parts = (torch_prefix + node_name[len(onnx_prefix) :]).replace("/", ".").split(".")[:-1]
            break
    else:
        return None
    name = ".".join(parts)
    # a Sequential's child repeats its parent's path: `cnn.0.cnn.0.0` -> `cnn.0.0`
    return re.sub(r"(\w+(?:\.\d+)*)\.\1\.(\d+)", r"\1.\2", name)


def _dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    return (q.astype(np.float64) - zero_point.astype(np.float64)) * scale.astype(np.float64)


def _lstm(node, init) -> dict[str, np.ndarray]:
    w = _dequantize(
        init[node.input[1]], init[node.input[8]][:, None, None], init[node.input[9]][:, None, None]
    )
    r = _dequantize(
        init[node.input[2]], init[node.input[10]][:, None, None], init[node.input[11]][:, None, None]
    )
    b = init[node.input[3]].astype(np.float64)  # (2, 8H): input biases, then recurrent ones
    h = r.shape[1]

    def torch_order(m: np.ndarray) -> np.ndarray:  # (4H, ...) in i, o, f, c -> i, f, g, o
        return np.concatenate([m[g * h : (g + 1) * h] for g in _IOFC_TO_IFGO])

    out = {}
    for d, suffix in ((0, ""), (1, "_reverse")):
        out[f"weight_ih_l0{suffix}"] = torch_order(w[d].T)  # (4H, I)
        out[f"weight_hh_l0{suffix}"] = torch_order(r[d].T)  # (4H, H)
        out[f"bias_ih_l0{suffix}"] = torch_order(b[d, : 4 * h])
        out[f"bias_hh_l0{suffix}"] = torch_order(b[d, 4 * h :])
    return out


def read_kokoro_onnx(path: Path | str) -> dict[str, np.ndarray]:
    """KModel's state dict (weight norm folded, float32) from the int8 ONNX file at `path`."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes = {n.name: n for n in graph.node}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    out: dict[str, np.ndarray] = {}

    def put(name: str, value: np.ndarray) -> None:
        out.setdefault(name, np.asarray(value, dtype=np.float32))  # ALBERT's shared layer recurs: first wins

    for node in graph.node:
        module = module_name(node.name)
        if module is None or re.search(r"_\d+$", module) or "stft" in module:
            continue  # a later pass of ALBERT's shared layer, or the STFT's fixed bases
        if node.op_type == "MatMulInteger" and node.input[1] in init:
            scale_node = nodes[node.name + "_scales_mul"]
            scale = next(init[i] for i in scale_node.input if i in init)
            put(module + ".weight", _dequantize(init[node.input[1]], scale, init[node.input[3]]).T)
        elif node.op_type == "ConvInteger":
            q = node.input[1]
            scale = init[q.removesuffix("_quantized") + "_scale"]
            put(module + ".weight", _dequantize(init[q], scale, init[node.input[3]]))
        elif (
            node.op_type in ("Conv", "ConvTranspose", "MatMul")
            and len(node.input) > 1
            and node.input[1] in init
        ):
            w = init[node.input[1]]
            put(module + ".weight", w.T if node.op_type == "MatMul" else w)
        elif node.op_type == "DynamicQuantizeLSTM":
            for name, value in _lstm(node, init).items():
                put(f"{module}.{name}", value)
        elif node.op_type == "Gather" and node.input[0].endswith("_quantized"):
            deq = next(c for c in consumers[node.output[0]] if c.op_type == "DequantizeLinear")
            put(module + ".weight", _dequantize(init[node.input[0]], init[deq.input[1]], init[deq.input[2]]))
    for name, value in init.items():  # the float tensors that kept their PyTorch names
        if name.endswith(("_quantized", "_scale", "_zero_point")) or value.dtype.kind != "f":
            continue
        for onnx_prefix, torch_prefix in (("encoder.", ""), ("decoder.decoder.", "decoder.")):
            if name.startswith(onnx_prefix) and ".stft." not in name:
                put(torch_prefix + name[len(onnx_prefix) :], value)
    for name in [n for n in out if re.search(r"\.alpha[12]\.\d+$", n)]:
        out[name] = out[name].reshape(1, -1, 1)
    if "bert.embeddings.word_embeddings.weight" not in out:
        raise CheckpointError(f"{path}: no Kokoro encoder found (not a kokoro-onnx export?)")
    return out


def load_kokoro_onnx(path: Path | str, backend):
    """The int8 ONNX export at `path` as a float Kokoro model on `backend` (Kokoro-82M v1.0's sizes)."""
    from blazr.loaders.kokoro import decoder_widths
    from blazr.models.kokoro import KokoroArgs, Model, sanitize

    weights = read_kokoro_onnx(path)
    args = KokoroArgs.from_dict(KOKORO_82M | {"widths": decoder_widths(weights)})
    model = Model(args, backend)
    model.load_weights(sanitize(weights, args), path)
    return model


def read_voice_npz(path: Path | str) -> dict[str, np.ndarray]:
    """kokoro-onnx's voice file (voices-v1.0.bin, voices_ja.npz): name -> pack (N, 1, 256) float32."""
    with np.load(path) as data:
        return {name: np.asarray(data[name], dtype=np.float32) for name in data.files}
