"""Format detection: which weight file a path means, which reader opens it, and the model_type a config
declares (inferred from its architecture name when missing). Which family module runs it is the model
registry's job (blazr.models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blazr.errors import CheckpointError, ModelNotFoundError
from blazr.loaders import Checkpoint

# Directory lookup order (features.md §1.6 item 8): single-file SafeTensors, then a sharded index, then GGUF
SINGLE_SAFETENSORS = ("model.safetensors", "pytorch_model.safetensors")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.safetensors.index.json")

# architectures[0] substrings -> model_type when config.json has none; order matters (qwen2moe before qwen)
ARCHITECTURE_HINTS = (
    ("llava", "llava"),
    ("qwen_vl", "qwen_vl"),
    ("qwenvl", "qwen_vl"),
    ("llama", "llama"),
    ("mixtral", "mixtral"),
    ("mistral", "mistral"),
    ("mamba", "mamba2"),
    ("qwen2moe", "qwen2_moe"),
    ("qwen", "qwen2"),
    ("phi3", "phi3"),
    ("phi", "phi"),
    ("gemma2", "gemma2"),
    ("gemma", "gemma"),
    ("starcoder", "starcoder2"),
    ("internlm", "internlm2"),
    ("falcon", "falcon"),
    ("neox", "gpt_neox"),
    ("pythia", "gpt_neox"),
    ("dbrx", "dbrx"),
    ("cohere", "command_r"),
    ("command", "command_r"),
)


def open_checkpoint(path: Path) -> Checkpoint:
    """Open whatever `path` names: a .gguf file, a .safetensors file, a shard index, or a model directory."""
    if not path.exists():
        raise ModelNotFoundError(f"model path {path} does not exist")
    weights = find_weights(path) if path.is_dir() else path
    fmt = sniff_format(weights)
    if fmt == "gguf":
        from blazr.loaders.gguf import open_gguf

        checkpoint = open_gguf(weights, user_path=path)
    else:
        from blazr.loaders.safetensors import open_safetensors

        checkpoint = open_safetensors(weights, user_path=path)
    checkpoint.config.setdefault("model_type", model_type_of(checkpoint.config))
    return checkpoint


def find_weights(directory: Path) -> Path:
    """The weight file a model directory means; raises ModelNotFoundError listing what was looked for."""
    candidates = [directory / name for name in SINGLE_SAFETENSORS + SHARD_INDEXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    others = sorted(directory.glob("*.safetensors.index.json")) or sorted(directory.glob("*.safetensors"))
    if len(others) == 1:
        return others[0]
    ggufs = sorted(directory.glob("*.gguf"))
    if ggufs:
        return ggufs[0]
    looked_for = ", ".join(SINGLE_SAFETENSORS + SHARD_INDEXES + ("*.safetensors", "*.gguf"))
    raise ModelNotFoundError(f"no model weights in directory {directory} (looked for {looked_for})")


def sniff_format(path: Path) -> str:
    """ "gguf" or "safetensors" from the file's name and first bytes (GGUF magic, or an 8-byte length then
    '{'). A .safetensors/.json file goes to the SafeTensors reader, which reports what is wrong with it."""
    if path.name.endswith((".safetensors", ".safetensors.index.json")):
        return "safetensors"
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == b"GGUF":
        return "gguf"
    if len(head) == 9 and head[8:9] == b"{" and path.suffix != ".gguf":
        return "safetensors"
    raise CheckpointError(f"{path}: not a GGUF or SafeTensors file (starts with bytes {head[:8].hex(' ')})")


def model_type_of(config: dict[str, Any]) -> str:
    """config's model_type, or one inferred from architectures[0] (features.md §1.6 item 7), default llama."""
    if config.get("model_type"):
        return config["model_type"]
    architectures = config.get("architectures") or [""]
    name = str(architectures[0]).lower()
    return next((model_type for hint, model_type in ARCHITECTURE_HINTS if hint in name), "llama")
