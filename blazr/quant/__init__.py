"""GGML tensor types: the block table (elements and bytes per block) for every type the installed `gguf`
package knows, and the set of types blazr can dequantize (in `blazr.quant.ggml_blocks`)."""

from __future__ import annotations

from dataclasses import dataclass

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

# The types `blazr.quant.ggml_blocks.dequantize` handles; a test keeps this equal to its dispatch table.
DEQUANT_TYPES: frozenset[str] = frozenset(
    {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
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
    ggml_type = GGML_TYPES.get(name)
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
