"""GGML tensor types: the block table (elements and bytes per block) for every type the installed `gguf`
package knows, and the set of types blazr can dequantize (in `blazr.quant.ggml_blocks`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from blazr.errors import CheckpointError, UnsupportedError


@dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type: `block_elems` values are stored in `block_bytes` bytes."""

    name: str  # "Q4_K"
    ggml_id: int  # the id stored in a GGUF tensor info
    block_elems: int
    block_bytes: int


def _build_table() -> dict[str, GGMLType]:
    # Sizes come from gguf itself so they cannot drift from the files it reads.
    table = {}
    for qtype in GGMLQuantizationType:
        if qtype in GGML_QUANT_SIZES:
            block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
            table[qtype.name] = GGMLType(qtype.name, int(qtype.value), block_elems, block_bytes)
    return table


GGML_TYPES: dict[str, GGMLType] = _build_table()
GGML_TYPES_BY_ID: dict[int, GGMLType] = {t.ggml_id: t for t in GGML_TYPES.values()}
# blazr's own block formats, made at load from other checkpoint formats (never read from a GGUF file, so no
# GGML id): I4Z holds AWQ and GPTQ int4 weights, v = (q - z) * d exactly (blazr.quant.int4). block_info and
# ggml_blocks.dequantize take them too; DEQUANT_TYPES below stays the GGML types only.
INTERNAL_TYPES: dict[str, GGMLType] = {"I4Z": GGMLType("I4Z", -1, 32, 20)}

# The types `blazr.quant.ggml_blocks.dequantize` handles; a test keeps this equal to its dispatch table.
DEQUANT_TYPES: frozenset[str] = frozenset(
    {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K"}
    | {"Q6_K", "Q8_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS"}
    | {"TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0"}
)


def unsupported_type(name: str) -> UnsupportedError:
    return UnsupportedError(f"GGUF tensor type {name} is not supported yet")


def ggml_type_name(type_id: int | GGMLQuantizationType) -> str:
    """The GGML type name ("Q4_K") for a numeric id or a gguf enum member."""
    ggml_type = GGML_TYPES_BY_ID.get(int(type_id))
    if ggml_type is None:
        raise UnsupportedError(f"GGUF tensor type id {int(type_id)} is unknown to blazr and the gguf package")
    return ggml_type.name


def block_info(name: str) -> tuple[int, int]:
    """(elements per block, bytes per block) of a GGML type name."""
    ggml_type = GGML_TYPES.get(name) or INTERNAL_TYPES.get(name)
    if ggml_type is None:
        raise unsupported_type(name)
    return ggml_type.block_elems, ggml_type.block_bytes


def row_bytes(name: str, n_elems: int) -> int:
    """Bytes that `n_elems` values of type `name` take; `n_elems` must fill whole blocks."""
    block_elems, block_bytes = block_info(name)
    if n_elems % block_elems:
        raise CheckpointError(
            f"a {name} row of {n_elems} values is not a whole number of {block_elems}-value blocks"
        )
    return n_elems // block_elems * block_bytes


# ---- packed weights -------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QuantWeight:
    """A quantized weight kept in its GGML blocks: backends multiply it packed (`matmul`, `embed`).

    `blocks` is (N, row_bytes) uint8, one row of whole blocks per output feature, rows in HF order (what
    `GGUFTensor.load_blocks()` returns); `shape` is the logical (N, K) of the dense weight.
    `perm` (GPTQ act-order) says the blocks hold the input features in another order: packed column j is
    input feature perm[j], so a backend multiplies x[:, perm] by the blocks (blazr.quant.int4).
    """

    blocks: np.ndarray  # (N, row_bytes) uint8
    format: str  # GGML type name, e.g. "Q4_K"
    shape: tuple[int, int]  # (N, K)
    perm: np.ndarray | None = None  # (K,) int32, or None: the columns are in input order

    def __post_init__(self):
        n, k = self.shape
        if self.blocks.dtype != np.uint8 or self.blocks.shape != (n, row_bytes(self.format, k)):
            raise CheckpointError(
                f"{self.format} weight of shape {self.shape} needs ({n}, {row_bytes(self.format, k)}) uint8 "
                f"blocks, got {self.blocks.shape} {self.blocks.dtype}"
            )
        if self.perm is not None and (self.perm.shape != (k,) or self.perm.dtype != np.int32):
            raise CheckpointError(f"{self.format} weight of {k} columns has a bad column order {self.perm!r}")
        if self.blocks.flags.writeable:
            # numba compiles a kernel once per argument type, and a writable array is another type than the
            # read-only one a memory-mapped file gives: a model mixing mapped and fused (copied) weights
            # compiled every packed kernel twice (~2.5 s a kernel on a first start). A read-only view of
            # its own leaves the caller's array as it was.
            blocks = self.blocks.view()
            blocks.flags.writeable = False
            object.__setattr__(self, "blocks", blocks)

    @property
    def nbytes(self) -> int:
        return int(self.blocks.nbytes)

    @property
    def ndim(self) -> int:
        return 2

    def rows(self, start: int, stop: int) -> QuantWeight:
        """Rows start..stop-1 as a QuantWeight sharing these blocks."""
        return QuantWeight(self.blocks[start:stop], self.format, (stop - start, self.shape[1]), self.perm)


def _same_layout(a: QuantWeight, b: QuantWeight) -> bool:
    """One format, row length and column order: rows of both can share one matmul."""
    if a.format != b.format or a.shape[1] != b.shape[1]:
        return False
    return a.perm is b.perm or (a.perm is not None and b.perm is not None and np.array_equal(a.perm, b.perm))


def concat_rows(weights: list[QuantWeight]) -> QuantWeight:
    """Stack the rows of same-format packed weights (fused q/k/v or gate/up): blocks never span rows."""
    first = weights[0]
    if any(not _same_layout(first, w) for w in weights):
        raise UnsupportedError(
            "only packed weights of one format, row length and column order can be concatenated"
        )
    blocks = np.concatenate([w.blocks for w in weights], axis=0)  # (sum N, row_bytes)
    return QuantWeight(blocks, first.format, (len(blocks), first.shape[1]), first.perm)


@dataclass(frozen=True, eq=False)
class QuantRowStack:
    """Packed weights of different formats stacked by rows (a Q4_K_M layer mixes Q4_K q/k with Q6_K v):
    `matmul` multiplies each part and concatenates the outputs, so the model still makes one call."""

    parts: tuple[QuantWeight, ...]

    @property
    def shape(self) -> tuple[int, int]:
        return (sum(p.shape[0] for p in self.parts), self.parts[0].shape[1])

    @property
    def format(self) -> str:
        return "+".join(p.format for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    @property
    def ndim(self) -> int:
        return 2


def stack_rows(weights: list[QuantWeight]) -> QuantWeight | QuantRowStack:
    """One packed weight from several with the same row length: runs of one format (and column order) are
    concatenated."""
    runs: list[list[QuantWeight]] = []
    for w in weights:
        if runs and _same_layout(runs[-1][0], w):
            runs[-1].append(w)
        else:
            runs.append([w])
    parts = tuple(concat_rows(run) if len(run) > 1 else run[0] for run in runs)
    return parts[0] if len(parts) == 1 else QuantRowStack(parts)
