"""LoRA adapter files -> low-rank pairs named by the base checkpoint's weight names.

Two formats: Hugging Face PEFT (a directory with adapter_config.json and adapter_model.safetensors; tensors
`base_model.model.<module>.lora_A.weight` (r, K) and `.lora_B.weight` (N, r), scale lora_alpha / r, or
lora_alpha / sqrt(r) with use_rslora, per module through rank_pattern / alpha_pattern), and llama.cpp's GGUF
adapters (general.type "adapter", adapter.type "lora"; tensors `<gguf name>.lora_a` (r, K) and `.lora_b`
(N, r), scale adapter.lora.alpha / r as llama.cpp applies it, 1 when alpha is 0). Both end as
{"model.layers.0.self_attn.q_proj.weight": LoraPair}, the names the model's layers declare
(blazr.models.lora binds them).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import BlazrError, LoraLoadError

PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"
_PEFT_PREFIX = "base_model.model."
# a PEFT tensor name: <module>.lora_A.weight or <module>.lora_A.<adapter>.weight (an unsaved state dict)
_PEFT_TENSOR = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[AB])(?:\.[^.]+)?\.weight$")


@dataclass(frozen=True)
class LoraPair:
    """One linear weight's update: y += scale * (x @ a.T) @ b.T."""

    a: np.ndarray  # (r, K) float32
    b: np.ndarray  # (N, r) float32
    scale: float


@dataclass
class LoraFile:
    path: Path
    format: str  # "peft" | "gguf"
    pairs: dict[str, LoraPair]  # base checkpoint weight name -> its update
    base_model: str | None = None  # what the adapter says it was trained on, when it says

    @property
    def rank(self) -> int:
        return max(p.a.shape[0] for p in self.pairs.values())


def read_lora(path: str | Path, heads: dict[str, int] | None = None) -> LoraFile:
    """Read a PEFT directory (or its adapter_model.safetensors) or a GGUF adapter. `heads` ({"q_proj": H,
    "k_proj": Hkv}) lets a GGUF adapter's q/k rows be put back in the HF order llama.cpp's converter
    permuted them out of (as the base weights are)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise LoraLoadError(f"LoRA adapter {path} does not exist")
    try:
        if path.is_file() and path.suffix == ".gguf":
            return _read_gguf(path, heads or {})
        return _read_peft(path.parent if path.is_file() else path)
    except LoraLoadError:
        raise
    except BlazrError as error:  # a truncated or corrupt file: the reader's message, as a load error
        raise LoraLoadError(str(error)) from None


def _read_peft(directory: Path) -> LoraFile:
    from blazr.loaders.safetensors import read_safetensors_file

    config_path, weights_path = directory / PEFT_CONFIG, directory / PEFT_WEIGHTS
    if not weights_path.exists():
        old = directory / "adapter_model.bin"
        hint = (
            " (adapter_model.bin is a pickle: save the adapter with safe_serialization=True)"
            if old.exists()
            else ""
        )
        raise LoraLoadError(
            f"{directory}: no {PEFT_WEIGHTS} (a PEFT adapter directory or a .gguf adapter){hint}"
        )
    config = _peft_config(config_path)
    tensors = read_safetensors_file(weights_path)
    halves: dict[str, dict[str, np.ndarray]] = {}
    for name, tensor in tensors.items():
        match = _PEFT_TENSOR.match(name)
        if match is None:
            raise LoraLoadError(
                f"{weights_path}: tensor {name!r} is not a LoRA A/B matrix (full-weight modules_to_save, "
                "trainable embeddings and LoRA biases are not supported)"
            )
        module = match["module"].removeprefix(_PEFT_PREFIX)
        halves.setdefault(module, {})[match["part"]] = tensor.load().astype(np.float32)
    pairs = {}
    for module, parts in sorted(halves.items()):
        if set(parts) != {"A", "B"}:
            missing = ({"A", "B"} - set(parts)).pop()
            raise LoraLoadError(f"{weights_path}: {module} has no lora_{missing} tensor")
        a, b = parts["A"], parts["B"]
        _check_pair(weights_path, module, a, b)
        pairs[module + ".weight"] = LoraPair(a, b, _peft_scale(config, module, a.shape[0]))
    if not pairs:
        raise LoraLoadError(f"{weights_path}: the adapter holds no LoRA tensors")
    return LoraFile(directory, "peft", pairs, config.get("base_model_name_or_path"))


def _peft_config(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise LoraLoadError(f"{path.parent}: no {PEFT_CONFIG} (it gives the adapter's lora_alpha and rank)")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise LoraLoadError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(config, dict):
        raise LoraLoadError(f"{path}: must be a JSON object")
    peft_type = config.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise LoraLoadError(f"{path}: peft_type {peft_type!r} is not supported (only LORA)")
    # options that change the forward pass beyond y += s (x A^T) B^T
    refused = {
        "use_dora": "DoRA adapters",
        "fan_in_fan_out": "fan_in_fan_out (GPT-2 Conv1D) adapters",
        "lora_bias": "LoRA biases",
        "use_qalora": "QA-LoRA adapters",
        "use_bdlora": "block-diagonal LoRA adapters",
        "alora_invocation_tokens": "activated LoRA (aLoRA) adapters",
        "layer_replication": "replicated layers",
        "target_parameters": "adapters on bare parameters (MoE experts)",
        "arrow_config": "Arrow routing",
        "kasa_config": "KaSA adapters",
        "monteclora_config": "MonteCLoRA adapters",
    }
    for key, what in refused.items():
        if config.get(key):
            raise LoraLoadError(f"{path}: {key} is set; {what} are not supported")
    if config.get("modules_to_save"):
        raise LoraLoadError(
            f"{path}: modules_to_save {config['modules_to_save']} (full weights trained beside the adapter) "
            "is not supported"
        )
    for key in ("r", "lora_alpha"):
        value = config.get(key, 8)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise LoraLoadError(f"{path}: {key}={value!r} must be a positive number")
    return config


def _peft_scale(config: dict[str, Any], module: str, rank: int) -> float:
    """PEFT's scaling of one module: its alpha (alpha_pattern, else lora_alpha) over its rank (the A matrix's
    rows, which rank_pattern set at training), or over sqrt(rank) with use_rslora."""
    alpha = float(config.get("lora_alpha", 8))
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):  # PEFT's get_pattern_key
            alpha = float(value)
            break
    return alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _read_gguf(path: Path, heads: dict[str, int]) -> LoraFile:
    from blazr.loaders.gguf import GGUF_TO_HF, _family, _lazy_tensor, _permuted_heads, hf_name, read_gguf

    gf = read_gguf(path)
    meta = gf.metadata
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise LoraLoadError(
            f"{path}: not a LoRA adapter (general.type={meta.get('general.type')!r}, "
            f"adapter.type={meta.get('adapter.type')!r}; llama.cpp's convert_lora_to_gguf.py writes them)"
        )
    if meta.get("adapter.alora.invocation_tokens"):
        raise LoraLoadError(f"{path}: activated LoRA (aLoRA) adapters are not supported")
    family = _family(meta, path)
    arch = meta.get("general.architecture", "llama")
    names = GGUF_TO_HF | family.GGUF_TENSOR_NAMES
    alpha = float(meta.get("adapter.lora.alpha", 0.0))
    halves: dict[str, dict[str, np.ndarray]] = {}
    for info in gf.tensors:
        base, dot, part = info.name.rpartition(".")
        if not dot or part not in ("lora_a", "lora_b"):
            raise LoraLoadError(f"{path}: tensor {info.name!r} is not a lora_a / lora_b matrix")
        hf = hf_name(base, names)
        n_head = _permuted_heads(hf, heads) if part == "lora_b" and arch in family.GGUF_QK_PERMUTED else None
        halves.setdefault(hf, {})[part] = _lazy_tensor(gf, info, hf, n_head).load().astype(np.float32)
    pairs = {}
    for name, parts in sorted(halves.items()):
        if set(parts) != {"lora_a", "lora_b"}:
            raise LoraLoadError(f"{path}: {name} has only {next(iter(parts))}")
        a, b = parts["lora_a"], parts["lora_b"]
        _check_pair(path, name, a, b)
        rank = a.shape[0]
        pairs[name] = LoraPair(a, b, alpha / rank if alpha else 1.0)  # llama.cpp: alpha 0 means scale 1
    if not pairs:
        raise LoraLoadError(f"{path}: the adapter holds no LoRA tensors")
    return LoraFile(path, "gguf", pairs, meta.get("general.base_model.0.name"))


def _check_pair(path: Path, name: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
        raise LoraLoadError(
            f"{path}: {name} has A {tuple(a.shape)} and B {tuple(b.shape)}; they must be (r, K) and (N, r)"
        )
