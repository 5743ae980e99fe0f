"""Kokoro-82M directories: config.json, the weights as SafeTensors (KModel's state dict, flat
"<component>.<name>" tensors, with or without DataParallel's "module." after the component) and voice packs.

Voice packs are the tensor `style` (N, 1, 2S) in voices/<name>.safetensors: row n - 1 is the style for n
phonemes. The published kokoro-v1_0.pth and voices/*.pt are PyTorch pickles, which blazr does not read
(it does not depend on torch): convert them to SafeTensors once (the error says how).
Which voice directories a model reads: blazr/tasks/speak_kokoro.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from blazr.errors import CheckpointError, ModelNotFoundError
from blazr.loaders.safetensors import read_safetensors_file
from blazr.loaders.vits_hf import fold_weight_norm
from blazr.models.kokoro import KokoroArgs, Model, sanitize

COMPONENTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
_CONVERT = (
    'convert it with PyTorch once: python -c "import torch, safetensors.torch as st; '
    "st.save_file({{'style': torch.load('{src}')}}, '{dst}')\""
)


def is_kokoro_dir(path: Path) -> bool:
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    return "istftnet" in data and "plbert" in data


def weights_file(path: Path) -> Path:
    found = sorted(Path(path).glob("*.safetensors"))
    if found:
        return found[0]
    pth = sorted(Path(path).glob("*.pth"))
    if pth:
        raise CheckpointError(
            f"{pth[0]}: Kokoro's PyTorch checkpoint is a pickle, which blazr does not read; save its state "
            "dict as flat '<component>.<name>' SafeTensors (kokoro-v1_0.safetensors) beside config.json"
        )
    raise ModelNotFoundError(f"{path}: no Kokoro weights (*.safetensors) beside config.json")


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """The flat state dict with weight norm folded and "module." dropped."""
    raw = {}
    for name, tensor in read_safetensors_file(path).items():
        component, _, rest = name.partition(".")
        if component not in COMPONENTS:
            raise CheckpointError(f"{path}: tensor {name!r} belongs to none of Kokoro's parts {COMPONENTS}")
        raw[f"{component}.{rest.removeprefix('module.')}"] = np.asarray(tensor.load(), dtype=np.float32)
    return fold_weight_norm(raw)


def decoder_widths(weights: dict[str, np.ndarray]) -> dict[str, int]:
    """The decoder's widths, which Kokoro's code fixes (1024 / 512 / 64), read from its tensors."""
    return {
        "hidden": weights["decoder.encode.conv1.weight"].shape[0],
        "to_generator": weights["decoder.decode.3.conv1.weight"].shape[0],
        "asr_res": weights["decoder.asr_res.0.weight"].shape[0],
    }


def load_kokoro(path: Path | str, backend) -> Model:
    path = Path(path)
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    source = weights_file(path)
    weights = read_weights(source)
    try:
        widths = decoder_widths(weights)
    except KeyError as e:
        raise CheckpointError(f"{source}: missing tensor {e.args[0]!r} (not a Kokoro checkpoint?)") from None
    args = KokoroArgs.from_dict(config | {"widths": widths})
    model = Model(args, backend)
    model.load_weights(sanitize(weights, args), source)
    return model


def list_voices(directory: Path) -> list[str]:
    return sorted(p.stem for p in Path(directory).glob("*.safetensors"))


def load_voice(directory: Path, name: str) -> np.ndarray:
    """The voice pack `name`: (N, 1, 2S) float32."""
    path = Path(directory) / f"{name}.safetensors"
    if not path.is_file():
        pt = path.with_suffix(".pt")
        if pt.is_file():
            raise CheckpointError(
                f"{pt}: a PyTorch voice pack, which blazr does not read; " + _CONVERT.format(src=pt, dst=path)
            )
        known = ", ".join(list_voices(directory)) or "none"
        raise ModelNotFoundError(f"voice {name!r} is not in {directory} (voices there: {known})")
    tensors = read_safetensors_file(path)
    if "style" not in tensors:
        raise CheckpointError(f"{path}: no tensor 'style' (a voice pack holds style (N, 1, 256))")
    return np.asarray(tensors["style"].load(), dtype=np.float32)


def style_for(pack: np.ndarray, n_phonemes: int) -> np.ndarray:
    """The pack's row for an utterance of n_phonemes (KPipeline's pack[len(phonemes) - 1]): (1, 2S)."""
    rows = pack.reshape(pack.shape[0], -1)
    return rows[min(max(n_phonemes, 1), len(rows)) - 1][None, :]
