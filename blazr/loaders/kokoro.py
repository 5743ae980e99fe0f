"""Kokoro-82M directories: config.json, the weights and voice packs.

The weights: KModel's state dict, either as published (kokoro-v1_0.pth: torch.save of {component: state dict})
or as SafeTensors (flat "<component>.<name>" tensors); with or without DataParallel's "module." after the
component. PyTorch files are read without torch and without running their pickle (blazr/loaders/torch_pickle.py).

Voice packs (N, 1, 2S): row n - 1 is the style for n phonemes; voices/<name>.pt as published (torch.save of the
tensor) or voices/<name>.safetensors (the tensor `style`), SafeTensors first when both are there.
Which voice directories a model reads: blazr/tasks/speak_kokoro.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from blazr.errors import CheckpointError, ModelNotFoundError
from blazr.loaders.safetensors import read_safetensors_file
from blazr.loaders.torch_pickle import read_torch_file
from blazr.loaders.vits_hf import fold_weight_norm
from blazr.models.kokoro import KokoroArgs, Model, sanitize

COMPONENTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
VOICE_SUFFIXES = (".safetensors", ".pt")


def is_kokoro_dir(path: Path) -> bool:
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    return "istftnet" in data and "plbert" in data


def weights_file(path: Path) -> Path:
    """The directory's weights: its SafeTensors file, else its PyTorch .pth."""
    found = sorted(Path(path).glob("*.safetensors")) or sorted(Path(path).glob("*.pth"))
    if found:
        return found[0]
    raise ModelNotFoundError(f"{path}: no Kokoro weights (*.safetensors or *.pth) beside config.json")


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """The flat state dict with weight norm folded and "module." dropped."""
    if path.suffix == ".pth":
        nested = read_torch_file(path)
        if not isinstance(nested, dict) or not all(isinstance(v, dict) for v in nested.values()):
            raise CheckpointError(f"{path}: not Kokoro's checkpoint (a dict of its parts' state dicts)")
        tensors = {f"{part}.{name}": value for part, inner in nested.items() for name, value in inner.items()}
    else:
        tensors = {name: tensor.load() for name, tensor in read_safetensors_file(path).items()}
    raw = {}
    for name, tensor in tensors.items():
        component, _, rest = name.partition(".")
        if component not in COMPONENTS:
            raise CheckpointError(f"{path}: tensor {name!r} belongs to none of Kokoro's parts {COMPONENTS}")
        if not isinstance(tensor, np.ndarray):
            raise CheckpointError(f"{path}: {name!r} is not a tensor")
        raw[f"{component}.{rest.removeprefix('module.')}"] = np.asarray(tensor, dtype=np.float32)
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
    return sorted({p.stem for suffix in VOICE_SUFFIXES for p in Path(directory).glob(f"*{suffix}")})


def load_voice(directory: Path, name: str) -> np.ndarray:
    """The voice pack `name`: (N, 1, 2S) float32, from <name>.safetensors, else <name>.pt."""
    path = next((p for s in VOICE_SUFFIXES if (p := Path(directory) / f"{name}{s}").is_file()), None)
    if path is None:
        known = ", ".join(list_voices(directory)) or "none"
        raise ModelNotFoundError(f"voice {name!r} is not in {directory} (voices there: {known})")
    if path.suffix == ".pt":
        pack = read_torch_file(path)
        if not isinstance(pack, np.ndarray):
            raise CheckpointError(f"{path}: not a voice pack (torch.save of one tensor (N, 1, 256))")
    else:
        tensors = read_safetensors_file(path)
        if "style" not in tensors:
            raise CheckpointError(f"{path}: no tensor 'style' (a voice pack holds style (N, 1, 256))")
        pack = tensors["style"].load()
    if pack.ndim != 3 or pack.shape[1] != 1:
        raise CheckpointError(f"{path}: a voice pack is (N, 1, 2S), got {pack.shape}")
    return np.asarray(pack, dtype=np.float32)


def style_for(pack: np.ndarray, n_phonemes: int) -> np.ndarray:
    """The pack's row for an utterance of n_phonemes (KPipeline's pack[len(phonemes) - 1]): (1, 2S)."""
    rows = pack.reshape(pack.shape[0], -1)
    return rows[min(max(n_phonemes, 1), len(rows)) - 1][None, :]
