"""GGUF reader: metadata, tensor infos and the one GGUF -> Hugging Face tensor-name table.

The header is parsed here over a memory map (the `gguf` package's reader builds numpy objects for every vocab
string and takes seconds on a 49k-token vocab); `gguf.constants` supplies the GGML type ids and block sizes.
Tensors stay in the file until `load()`; quantized ones are dequantized by blazr.quant.ggml_blocks.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from blazr.errors import CheckpointError, UnsupportedError
from blazr.loaders import Checkpoint, LazyTensor, release_mapped_pages
from blazr.loaders.safetensors import bf16_to_f32

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF -> HF tensor names every decoder shares. {N} is the block index, {E} an expert index; ".weight"/".bias"
# carry over. A family's own names (Gemma 2's post-norms, MoE experts, ...) are in its GGUF_TENSOR_NAMES.
GGUF_TO_HF: dict[str, str] = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "blk.{N}.attn_norm": "model.layers.{N}.input_layernorm",
    "blk.{N}.attn_q": "model.layers.{N}.self_attn.q_proj",
    "blk.{N}.attn_k": "model.layers.{N}.self_attn.k_proj",
    "blk.{N}.attn_v": "model.layers.{N}.self_attn.v_proj",
    "blk.{N}.attn_output": "model.layers.{N}.self_attn.o_proj",
    "blk.{N}.ffn_norm": "model.layers.{N}.post_attention_layernorm",
    "blk.{N}.ffn_gate": "model.layers.{N}.mlp.gate_proj",
    "blk.{N}.ffn_up": "model.layers.{N}.mlp.up_proj",
    "blk.{N}.ffn_down": "model.layers.{N}.mlp.down_proj",
}

_BLOCK_RE = re.compile(r"^(blk|v\.enc\.blk)\.(\d+)\.")
_EXPERT_RE = re.compile(r"^(blk\.\{N\}\.ffn_(?:gate|up|down))\.(\d+)$")
_SUFFIXES = (".weight", ".bias")


def hf_name(gguf_name: str, table: dict[str, str] = GGUF_TO_HF) -> str:
    """The HF name for a GGUF tensor name by `table` (default GGUF_TO_HF); names missing from it are returned
    unchanged, for the model's strict load to report."""
    block = _BLOCK_RE.match(gguf_name)
    key = _BLOCK_RE.sub(r"\1.{N}.", gguf_name) if block else gguf_name
    fields = {"N": block.group(2)} if block else {}
    if key in table:  # names whose suffix is part of the mapping (ssm_dt.bias) or that have none
        return table[key].format(**fields)
    base, suffix = key, ""
    for s in _SUFFIXES:
        if key.endswith(s):
            base, suffix = key[: -len(s)], s
    expert = _EXPERT_RE.match(base)
    if expert:
        base, fields["E"] = expert.group(1) + ".{E}", expert.group(2)
    if base not in table:
        return gguf_name
    return table[base].format(**fields) + suffix


_REQUIRED = object()


def _family(meta: dict[str, Any], path: Path):
    """The blazr.models family module that runs this file's general.architecture."""
    from blazr.models import GGUF_ARCHITECTURES, gguf_family

    arch = meta.get("general.architecture", "llama")
    family = gguf_family(arch)
    if family is None:
        raise UnsupportedError(
            f"{path}: GGUF architecture {arch!r} is not supported yet "
            f"(supported: {', '.join(sorted(GGUF_ARCHITECTURES))})"
        )
    return family


def gguf_to_hf_config(meta: dict[str, Any], shapes: dict[str, tuple[int, ...]], path: Path) -> dict[str, Any]:
    """Translate GGUF metadata into a Hugging Face config.json dict: the keys every decoder has here, the
    family's own through its gguf_config hook."""
    arch = meta.get("general.architecture", "llama")
    family = _family(meta, path)

    def get(key: str, default: Any = _REQUIRED) -> Any:
        value = meta.get(f"{arch}.{key}", default)
        if value is _REQUIRED:
            raise CheckpointError(f"{path}: GGUF metadata key {arch}.{key} is missing")
        return value

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    config = {
        "gguf_architecture": arch,
        "hidden_size": hidden,
        "intermediate_size": _most(get("feed_forward_length")),  # per layer in hybrids (0 on some layers)
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        # hybrids write one KV head count per layer (0 on state-space layers): the attention layers' count
        "num_key_value_heads": _most(get("attention.head_count_kv", heads)),
        # a state-space model has no attention heads (llama.cpp writes a head count of 0)
        "head_dim": int(get("attention.key_length", hidden // heads if heads else 0)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 4096)),
        "vocab_size": _vocab_size(meta, arch, shapes, path),
        "tie_word_embeddings": "output.weight" not in shapes,
        "attention_bias": "blk.0.attn_q.bias" in shapes,
    }
    config.update(_optional_config(meta, arch))
    if getattr(family, "GGUF_CONFIG_READS_TENSORS", False):
        # hparams llama.cpp reads from which tensors a file has (Falcon's second layer norm): give the shapes
        return family.gguf_config(arch, get, config, shapes)
    return family.gguf_config(arch, get, config)


def _most(value: Any) -> int:
    """A per-layer count's largest entry (a scalar stands for every layer)."""
    return int(max(value)) if isinstance(value, list) else int(value)


def _vocab_size(meta: dict[str, Any], arch: str, shapes: dict[str, tuple[int, ...]], path: Path) -> int:
    for key in (f"{arch}.vocab_size", "general.vocab_size"):
        if key in meta:
            return int(meta[key])
    if "tokenizer.ggml.tokens" in meta:
        return len(meta["tokenizer.ggml.tokens"])
    if "token_embd.weight" in shapes:
        return shapes["token_embd.weight"][0]
    raise CheckpointError(
        f"{path}: cannot tell the vocabulary size (no vocab_size key, tokens or token_embd)"
    )


def _optional_config(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    """Config keys that exist only when the GGUF metadata carries them."""
    out: dict[str, Any] = {}
    renames = {
        f"{arch}.attention.sliding_window": "sliding_window",
        f"{arch}.expert_count": "num_local_experts",
        f"{arch}.expert_used_count": "num_experts_per_tok",
        "tokenizer.ggml.bos_token_id": "bos_token_id",
        "tokenizer.ggml.eos_token_id": "eos_token_id",
        "tokenizer.ggml.padding_token_id": "pad_token_id",
    }
    for key, hf_key in renames.items():
        if key in meta:
            out[hf_key] = meta[key]
    rope_scaling = _rope_scaling(meta, arch)
    if rope_scaling:
        out["rope_scaling"] = rope_scaling
    return out


def _rope_scaling(meta: dict[str, Any], arch: str) -> dict[str, Any] | None:
    """HF rope_scaling from {arch}.rope.scaling.* keys (llama3-style RoPE arrives as a rope_freqs tensor)."""
    prefix = f"{arch}.rope.scaling."
    kind = meta.get(prefix + "type", "linear" if prefix + "factor" in meta else "none")
    factor = float(meta.get(prefix + "factor", 1.0))
    if kind == "none" or (kind == "linear" and factor == 1.0):
        return None
    scaling: dict[str, Any] = {"rope_type": kind, "factor": factor}
    optional = {
        "original_context_length": "original_max_position_embeddings",
        "attn_factor": "attention_factor",
        "yarn_beta_fast": "beta_fast",
        "yarn_beta_slow": "beta_slow",
        "low_freq_factor": "low_freq_factor",
        "high_freq_factor": "high_freq_factor",
    }
    for key, hf_key in optional.items():
        if prefix + key in meta:
            scaling[hf_key] = meta[prefix + key]
    return scaling


@dataclass
class TensorInfo:
    name: str  # GGUF name
    shape: tuple[int, ...]  # numpy order (GGUF dims reversed)
    type_name: str  # GGML type name: "F32", "Q4_1", ...
    offset: int  # absolute byte offset in the file
    nbytes: int


@dataclass
class GGUFFile:
    path: Path
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data: np.memmap  # the whole file, uint8


class _Cursor:
    """Sequential little-endian reads over the mapped header; running off the end is a truncated file."""

    SCALARS = {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }
    STRING, ARRAY = 8, 9

    def __init__(self, path: Path, data: np.memmap):
        self.path, self.buf, self.pos = path, memoryview(data), 0

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self._need(size)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        self._need(n)
        text = str(self.buf[self.pos : self.pos + n], "utf-8", "replace")
        self.pos += n
        return text

    def value(self, type_id: int) -> Any:
        if type_id == self.STRING:
            return self.string()
        if type_id == self.ARRAY:
            return self.array()
        if type_id not in self.SCALARS:
            raise CheckpointError(f"{self.path}: unknown GGUF value type {type_id} at byte {self.pos}")
        return self.scalar(self.SCALARS[type_id])

    def array(self) -> list[Any]:
        item_type, count = self.scalar("<I"), self.scalar("<Q")
        if item_type in self.SCALARS:  # numeric arrays are read in one go
            dtype = np.dtype(self.SCALARS[item_type])
            self._need(count * dtype.itemsize)
            items = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
            self.pos += count * dtype.itemsize
            return items.tolist()
        return [self.value(item_type) for _ in range(count)]

    def _need(self, n: int) -> None:
        if self.pos + n > self.buf.nbytes:
            raise CheckpointError(
                f"{self.path}: GGUF header is truncated (needs byte {self.pos + n}, file ends first)"
            )


def read_gguf(path: Path) -> GGUFFile:
    """Parse the header and tensor infos of a GGUF v2/v3 file and check every tensor lies inside the file."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(path, data)
    magic = bytes(cur.buf[:4])
    if magic != GGUF_MAGIC:
        raise CheckpointError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    cur.pos = 4
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise UnsupportedError(
            f"{path}: GGUF version {version} is not supported (only 2 and 3, little-endian)"
        )
    n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
    metadata = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.scalar("<I"))
    infos = [_tensor_info(cur) for _ in range(n_tensors)]
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = -(-cur.pos // alignment) * alignment
    tensors = [_place(path, info, data_start, data.size) for info in infos]
    return GGUFFile(path=path, metadata=metadata, tensors=tensors, data=data)


def _tensor_info(cur: _Cursor) -> TensorInfo:
    name = cur.string()
    dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
    type_id, offset = cur.scalar("<I"), cur.scalar("<Q")
    try:
        ggml_type = GGMLQuantizationType(type_id)
    except ValueError:
        raise UnsupportedError(
            f"{cur.path}: tensor {name} has GGML type id {type_id}, unknown to blazr"
        ) from None
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    if dims and dims[0] % block_size:
        raise CheckpointError(
            f"{cur.path}: tensor {name} has rows of {dims[0]} values, not a multiple of the "
            f"{ggml_type.name} block size {block_size}"
        )
    n_values = int(np.prod(dims, dtype=np.int64))
    nbytes = n_values // block_size * type_size
    return TensorInfo(name, tuple(reversed(dims)), ggml_type.name, offset, nbytes)


def _place(path: Path, info: TensorInfo, data_start: int, file_size: int) -> TensorInfo:
    info.offset += data_start
    if info.offset + info.nbytes > file_size:
        raise CheckpointError(
            f"{path}: tensor {info.name} ends at byte {info.offset + info.nbytes} but the file has "
            f"{file_size} bytes (truncated download?)"
        )
    return info


def open_gguf(path: Path, user_path: Path | None = None) -> Checkpoint:
    """A GGUF file as a Checkpoint: HF tensor names and an HF-style config translated from its metadata."""
    gf = read_gguf(path)
    shapes = {t.name: t.shape for t in gf.tensors}
    config = gguf_to_hf_config(gf.metadata, shapes, path)
    if "rope_freqs.weight" in shapes:  # llama3-style RoPE: per-frequency divisors, carried in the config
        config["rope_scaling"] = _rope_freq_factors(gf)
    arch = gf.metadata.get("general.architecture", "llama")
    family = _family(gf.metadata, path)
    # tensors that carry hparams, not weights (Phi-3's LongRoPE factors): a family's optional
    # GGUF_CONFIG_TENSORS maps their names to config keys, which get their values as float lists
    as_config = getattr(family, "GGUF_CONFIG_TENSORS", {})
    for info in gf.tensors:
        if info.name in as_config:
            config[as_config[info.name]] = _read_dense(gf, info).astype(np.float32).ravel().tolist()
    names = GGUF_TO_HF | family.GGUF_TENSOR_NAMES
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    tensors = {}
    for info in gf.tensors:
        if info.name == "rope_freqs.weight" or info.name in as_config:
            continue
        name = hf_name(info.name, names)
        n_head = _permuted_heads(name, heads) if arch in family.GGUF_QK_PERMUTED else None
        tensors[name] = _lazy_tensor(gf, info, name, n_head)
    return Checkpoint(
        path=user_path or path,
        format="gguf",
        config=config,
        tensors=tensors,
        directory=path.parent,
        gguf_metadata=gf.metadata,
        files=[path],
    )


def _permuted_heads(name: str, heads: dict[str, int]) -> int | None:
    """Head count the converter used to permute this tensor's rows, or None if it was not permuted."""
    for proj, n_head in heads.items():
        if name.endswith((f"self_attn.{proj}.weight", f"self_attn.{proj}.bias")):
            return n_head
    return None


def _rope_freq_factors(gf: GGUFFile) -> dict[str, Any]:
    info = next(t for t in gf.tensors if t.name == "rope_freqs.weight")
    factors = _read_dense(gf, info).astype(np.float32)
    return {"rope_type": "freq_factors", "factors": factors.tolist()}


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's LlamaModel.permute, which reorders each head's rows from HF's half-split RoPE layout
    to interleaved pairs: w.reshape(n_head, 2, hd // 2, ...).swapaxes(1, 2). This is its inverse."""
    rest = w.shape[1:]
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


@dataclass
class GGUFTensor(LazyTensor):
    """A GGUF tensor: load() as for any LazyTensor, plus load_blocks() for kernels that read GGML blocks."""

    _read_blocks: Callable[[], np.ndarray] | None = field(default=None, repr=False)

    def load_blocks(self) -> np.ndarray:
        """The undecoded data as (rows, bytes_per_row) uint8, rows in HF order: a view of the file, except
        for permuted Q/K tensors, whose rows are reordered into a copy (blocks never span rows)."""
        return self._read_blocks()


def _lazy_tensor(gf: GGUFFile, info: TensorInfo, name: str, n_head: int | None) -> GGUFTensor:
    def read() -> np.ndarray:
        if info.type_name in DENSE_TYPES:
            w = _read_dense(gf, info)
        else:
            w = _dequantize(gf, info)
        if not n_head:
            return w
        reordered = unpermute_qk(w, n_head)  # a copy: the mapped rows are not needed any more
        _release_pages(gf, info)
        return reordered

    def read_blocks() -> np.ndarray:
        rows = int(np.prod(info.shape[:-1], dtype=np.int64))
        blocks = gf.data[info.offset : info.offset + info.nbytes].reshape(rows, -1)  # (rows, bytes_per_row)
        if not n_head:
            return blocks
        reordered = unpermute_qk(blocks, n_head)
        _release_pages(gf, info)
        return reordered

    return GGUFTensor(
        name=name,
        shape=info.shape,
        dtype=info.type_name,
        source=gf.path,
        _read=read,
        _read_blocks=read_blocks,
        _release=lambda: _release_pages(gf, info),
    )


def _release_pages(gf: GGUFFile, info: TensorInfo) -> None:
    release_mapped_pages(gf.data, info.offset, info.nbytes)


DENSE_TYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
}


def _read_dense(gf: GGUFFile, info: TensorInfo) -> np.ndarray:
    """A view into the mapped file (BF16 is widened to float32, a copy)."""
    raw = gf.data[info.offset : info.offset + info.nbytes]
    values = raw.view(DENSE_TYPES[info.type_name]).reshape(info.shape)
    return bf16_to_f32(values) if info.type_name == "BF16" else values


def _dequantize(gf: GGUFFile, info: TensorInfo) -> np.ndarray:
    from blazr.quant import ggml_blocks

    raw = gf.data[info.offset : info.offset + info.nbytes]  # (nbytes,) uint8 blocks
    return ggml_blocks.dequantize(raw, info.type_name, info.shape)
