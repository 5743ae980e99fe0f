"""PyTorch-written files for tests/test_torch_pickle.py (blazr reads torch.save's format without torch):

    <venv with torch and safetensors>/bin/python tests/parity/make_torch_files.py

writes tests/data/torch_files/:
  * cases.pt: one dict of the tensor layouts a checkpoint holds (float32, float16, bfloat16, int64, bool, a
    0-d scalar, a transposed view, a slice at an offset sharing its storage with another entry, an empty
    tensor, an nn.Parameter, a nested OrderedDict state dict with its _metadata) and cases.npz the same
    values as numpy arrays (bfloat16 widened to float32), keys joined with "/";
  * tiny_kokoro.pth and tiny.pt: tests/data/tiny_kokoro's weights and voice pack saved as Kokoro-82M publishes
    its own (kokoro-v1_0.pth: {component: state dict} with DataParallel's "module." prefixes; voices/*.pt:
    the style tensor), to be read back equal to the SafeTensors files.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "torch_files"
TINY = ROOT / "tests" / "data" / "tiny_kokoro"


def cases() -> dict:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    state = collections.OrderedDict(weight=torch.randn(3, 2, generator=g), bias=torch.zeros(3))
    state._metadata = collections.OrderedDict({"": {"version": 1}})
    return {
        "f32": torch.randn(2, 1, 4, generator=g),
        "f16": torch.randn(5, generator=g).half(),
        "bf16": torch.randn(3, 3, generator=g).bfloat16(),
        "i64": torch.arange(-3, 4),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "transposed": base.t(),
        "base": base,
        "rows": base[1:3],
        "empty": torch.zeros(0, 4),
        "param": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
        "state": state,
    }


def flat(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}/")
        else:
            t = value.detach()
            out[prefix + key] = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tree = cases()
    torch.save(tree, OUT / "cases.pt")
    np.savez(OUT / "cases.npz", **flat(tree))
    weights = load_file(TINY / "kokoro-v1_0.safetensors")
    parts: dict[str, collections.OrderedDict] = collections.defaultdict(collections.OrderedDict)
    for name, tensor in weights.items():
        component, _, rest = name.partition(".")
        parts[component]["module." + rest.removeprefix("module.")] = tensor
    torch.save(dict(parts), OUT / "tiny_kokoro.pth")
    torch.save(load_file(TINY / "voices" / "tiny.safetensors")["style"], OUT / "tiny.pt")
    print(f"wrote {sorted(p.name for p in OUT.iterdir())} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
