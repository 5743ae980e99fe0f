"""GGML types and numpy dequantization: blazr.quant.ggml_blocks must equal gguf.quants bit for bit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from blazr.errors import CheckpointError, UnsupportedError
from blazr.quant import (
    DEQUANT_TYPES,
    GGML_TYPES,
    block_info,
    ggml_blocks,
    ggml_type_name,
    iq_grids,
    row_bytes,
)
from blazr.quant.ggml_blocks import dequantize

# Byte offsets of the f16 scale/min fields in each block; random bytes there could be inf or nan.
F16_FIELDS = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q8_0": [0],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
    "IQ1_S": [0],
    "IQ1_M": [],  # its f16 d is split over 4 nibbles: set_iq1_m_scale
    "IQ2_XXS": [0],
    "IQ2_XS": [0],
    "IQ2_S": [0],
    "IQ3_XXS": [0],
    "IQ3_S": [0],
    "IQ4_NL": [0],
    "IQ4_XS": [0],
    "TQ1_0": [52],
    "TQ2_0": [64],
    "MXFP4": [],  # e8m0 and e4m3 scale bytes: every byte value is a number
    "NVFP4": [],
    "Q1_0": [0],
    "Q8_1": [],
    "Q8_K": [],
}
F32_FIELDS = {"Q8_1": [0, 4], "Q8_K": [0]}  # gguf-py sizes Q8_1 at 40 bytes: d and s are f32
BLOCK_TYPES = list(F16_FIELDS)
ALL_TYPES = ["F32", "F16", "BF16", *BLOCK_TYPES]
# gguf.quants cannot dequantize these: Q8_1 and Q8_K are ggml's activation formats, Q1_0 is newer than
# gguf-py's reference code. They are tested on blocks built from known values instead.
NO_GGUF_REFERENCE = ["Q8_1", "Q8_K", "Q1_0"]
GGUF_TYPES = [t for t in ALL_TYPES if t not in NO_GGUF_REFERENCE]
# Types gguf.quants.quantize supports, with how far from the input its output may decode (x max |w|).
GGUF_QUANTIZES = {
    "F32": 0.1,
    "F16": 0.1,
    "BF16": 0.1,
    "Q4_0": 0.1,
    "Q4_1": 0.1,
    "Q5_0": 0.1,
    "Q5_1": 0.1,
    "Q8_0": 0.1,
    "MXFP4": 0.26,  # e2m1 levels 8 and 12 are a third of the block maximum apart
    "TQ1_0": 0.51,  # ternary: values round to -d, 0 or d, with d the block maximum
    "TQ2_0": 0.51,
}


def random_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """n finite f16 values of both signs, moderate and tiny (subnormal) magnitudes, as (n, 2) bytes."""
    values = rng.uniform(-2.0, 2.0, n) * np.where(rng.random(n) < 0.1, 1e-6, 1.0)
    return values.astype(np.float16).view(np.uint8).reshape(n, 2)


def set_iq1_m_scale(raw: np.ndarray, f16_bytes: np.ndarray) -> None:
    """IQ1_M keeps its f16 d in the top nibbles of the 4 u16 words at bytes 48-55, lowest nibble first."""
    words = raw[:, 48:56].view(np.uint16)  # (n, 4)
    d_bits = f16_bytes.view(np.uint16)  # (n, 1)
    words &= 0x0FFF
    words |= ((d_bits >> np.arange(0, 16, 4, dtype=np.uint16)) & 0xF) << 12


def set_float_fields(raw: np.ndarray, type_name: str, f16_bytes: np.ndarray) -> None:
    """Write one f16 value per block (n, 2) into every float field of `raw` (n, block_bytes)."""
    for offset in F16_FIELDS[type_name]:
        raw[:, offset : offset + 2] = f16_bytes
    for offset in F32_FIELDS.get(type_name, []):
        raw[:, offset : offset + 4] = f16_bytes.view(np.float16).astype(np.float32).view(np.uint8)
    if type_name == "IQ1_M":
        set_iq1_m_scale(raw, f16_bytes)


def random_tensor_bytes(rng: np.random.Generator, type_name: str, n_elems: int) -> np.ndarray:
    """Raw bytes of a random tensor: random bits everywhere except finite float fields. (n_blocks, bytes)"""
    block_elems, block_bytes = block_info(type_name)
    n_blocks = n_elems // block_elems
    if type_name == "F32":
        return rng.standard_normal(n_blocks, dtype=np.float32).view(np.uint8).reshape(n_blocks, 4)
    if type_name == "F16":
        return random_f16(rng, n_blocks)
    if type_name == "BF16":
        top_halves = rng.standard_normal(n_blocks, dtype=np.float32).view(np.uint32) >> 16
        return top_halves.astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    set_float_fields(raw, type_name, random_f16(rng, n_blocks))
    return raw


def gguf_dequantize(raw: np.ndarray, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The reference: gguf.quants on (rows, row_bytes) bytes."""
    rows = raw.reshape(-1, row_bytes(type_name, shape[-1]))
    if type_name == "F32":
        rows = rows.view(np.float32)
    return gguf_quants.dequantize(rows, GGMLQuantizationType[type_name]).reshape(shape)


def assert_bit_equal(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    assert np.array_equal(ours, theirs)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))  # also tells -0.0 from 0.0


# ---- type table -----------------------------------------------------------------------------------------


def test_type_table_covers_every_gguf_type():
    for qtype, (block_elems, block_bytes) in GGML_QUANT_SIZES.items():
        assert ggml_type_name(qtype) == qtype.name
        assert ggml_type_name(int(qtype.value)) == qtype.name
        assert block_info(qtype.name) == (block_elems, block_bytes)
        assert GGML_TYPES[qtype.name].ggml_id == qtype.value


def test_type_table_known_sizes():
    assert block_info("Q4_1") == (32, 20)
    assert block_info("Q6_K") == (256, 210)
    assert row_bytes("Q4_K", 4096) == 16 * 144
    assert row_bytes("F16", 7) == 14
    assert ggml_type_name(3) == "Q4_1"


def test_type_table_errors():
    with pytest.raises(UnsupportedError, match="999"):
        ggml_type_name(999)
    with pytest.raises(UnsupportedError, match="NOPE"):
        block_info("NOPE")
    with pytest.raises(CheckpointError, match="Q4_0 row of 33"):
        row_bytes("Q4_0", 33)


def test_dequant_types_match_decoders():
    assert DEQUANT_TYPES == set(ALL_TYPES)
    assert DEQUANT_TYPES == {"F32", *ggml_blocks._DECODERS}


def test_every_gguf_block_type_is_decoded():
    # The rest are plain arrays the loader reads itself; a type new in gguf fails here until it is decoded.
    assert set(GGML_TYPES) - DEQUANT_TYPES == {"F64", "I8", "I16", "I32", "I64"}


# ---- dequantize vs gguf.quants --------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # gguf: MXFP4 inf
@pytest.mark.parametrize("type_name", GGUF_TYPES)
@pytest.mark.parametrize("shape_blocks", [(1, 1), (3, 1), (1, 17), (5, 17), (2, 3, 2)])
def test_random_blocks_equal_gguf(rng, type_name, shape_blocks):
    # The last dim is counted in super-blocks of 256 values so every type gets the same shapes; 17 -> 4352.
    shape = (*shape_blocks[:-1], shape_blocks[-1] * 256)
    raw = random_tensor_bytes(rng, type_name, int(np.prod(shape)))
    assert_bit_equal(dequantize(raw.reshape(-1), type_name, shape), gguf_dequantize(raw, type_name, shape))


@pytest.mark.parametrize("type_name", ["Q4_0", "Q8_0", "IQ4_NL", "MXFP4", "NVFP4"])
def test_single_small_row(rng, type_name):
    k = block_info(type_name)[0]  # one block
    raw = random_tensor_bytes(rng, type_name, k)
    assert_bit_equal(dequantize(raw, type_name, (1, k)), gguf_dequantize(raw, type_name, (1, k)))


class CountingPool(ThreadPoolExecutor):
    submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


@pytest.mark.parametrize("type_name", ["Q4_1", "Q6_K", "BF16", "IQ2_S", "TQ1_0"])
def test_parallel_split_equals_gguf(rng, monkeypatch, type_name):
    # 150 rows of 4352 values are 10 decode steps: 3 workers get 4 + 4 + 2 steps.
    with CountingPool(max_workers=3) as pool:
        monkeypatch.setattr(ggml_blocks, "_cpu_count", lambda: 3)
        monkeypatch.setattr(ggml_blocks, "_pool", lambda: pool)
        shape = (150, 4352)
        raw = random_tensor_bytes(rng, type_name, int(np.prod(shape)))
        assert_bit_equal(dequantize(raw, type_name, shape), gguf_dequantize(raw, type_name, shape))
    assert pool.submitted == 3


def test_f32_is_a_view(rng):
    raw = random_tensor_bytes(rng, "F32", 64)
    out = dequantize(raw, "F32", (2, 32))
    assert np.shares_memory(out, raw)
    assert_bit_equal(out, raw.view(np.float32).reshape(2, 32))


@pytest.mark.parametrize("type_name", GGUF_QUANTIZES)
@pytest.mark.parametrize("shape", [(1, 256), (7, 4352)])
def test_round_trip_of_gguf_quantize(rng, type_name, shape):
    weights = (rng.standard_normal(shape) * 0.05).astype(np.float32)  # (rows, K)
    packed = np.asarray(gguf_quants.quantize(weights, GGMLQuantizationType[type_name]))
    ours = dequantize(packed, type_name, shape)
    assert_bit_equal(ours, gguf_dequantize(packed.view(np.uint8), type_name, shape))
    # A real quantizer output decodes close to the input: the layout, not only the arithmetic, is right.
    assert np.abs(ours - weights).max() < GGUF_QUANTIZES[type_name] * np.abs(weights).max()


def test_gguf_quantize_list_is_complete():
    weights = np.zeros((1, 256), dtype=np.float32)
    quantizable = set()
    for type_name in ALL_TYPES:
        try:
            gguf_quants.quantize(weights, GGMLQuantizationType[type_name])
        except NotImplementedError:
            continue
        quantizable.add(type_name)
    assert quantizable == set(GGUF_QUANTIZES)


# Fill bytes and scale values that reach the corners: all bits clear or set, alternating bits, signed zeros,
# the smallest subnormal and the largest f16.
EDGE_FILLS = [0x00, 0xFF, 0x55, 0xAA, 0x0F, 0xF0]
EDGE_SCALES = [0.0, -0.0, 2.0**-24, -(2.0**-24), 1.0, -1.0, 65504.0, -65504.0]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # gguf: MXFP4 inf
@pytest.mark.parametrize("type_name", [t for t in GGUF_TYPES if t in F16_FIELDS])
def test_edge_bit_patterns_equal_gguf(type_name):
    block_elems, block_bytes = block_info(type_name)
    fills = np.repeat(np.array(EDGE_FILLS, dtype=np.uint8), len(EDGE_SCALES))
    raw = np.repeat(fills[:, None], block_bytes, axis=1)  # (48, block_bytes)
    scales = np.tile(np.array(EDGE_SCALES, dtype=np.float16), len(EDGE_FILLS))
    set_float_fields(raw, type_name, scales.view(np.uint8).reshape(-1, 2))
    shape = (len(raw), block_elems)
    assert_bit_equal(dequantize(raw, type_name, shape), gguf_dequantize(raw, type_name, shape))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # gguf: MXFP4 inf
@pytest.mark.parametrize("type_name, scale_bytes", [("MXFP4", slice(0, 1)), ("NVFP4", slice(0, 4))])
def test_every_fp4_scale_byte_equals_gguf(rng, type_name, scale_bytes):
    # Every e8m0 / e4m3 byte, subnormal, NaN code and overflow to inf included, with random codes.
    block_elems, block_bytes = block_info(type_name)
    raw = rng.integers(0, 256, (256, block_bytes), dtype=np.uint8)
    raw[:, scale_bytes] = np.arange(256, dtype=np.uint8)[:, None]
    shape = (256, block_elems)
    assert_bit_equal(dequantize(raw, type_name, shape), gguf_dequantize(raw, type_name, shape))


def test_every_block_type_through_a_gguf_file(tmp_path, rng):
    # Our header reader places each tensor; the bytes gguf's own reader finds decode the same.
    import gguf

    from blazr.loaders.gguf import read_gguf

    writer = gguf.GGUFWriter(tmp_path / "all.gguf", "llama")
    shapes = {}
    for type_name in BLOCK_TYPES:
        shapes[type_name] = (3, 512)
        raw = random_tensor_bytes(rng, type_name, 3 * 512).reshape(3, -1)  # (rows, row_bytes)
        writer.add_tensor(type_name.lower(), raw, raw_dtype=GGMLQuantizationType[type_name])
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        write()
    writer.close()
    gf = read_gguf(tmp_path / "all.gguf")
    reference = {t.name: t for t in gguf.GGUFReader(tmp_path / "all.gguf").tensors}
    for info in gf.tensors:
        assert info.shape == shapes[info.type_name]
        ours_raw = gf.data[info.offset : info.offset + info.nbytes]
        raw = np.asarray(reference[info.name].data)
        assert np.array_equal(ours_raw, raw.reshape(-1))
        ours = dequantize(ours_raw, info.type_name, info.shape)
        if info.type_name in GGUF_TYPES:
            assert_bit_equal(ours, gguf_dequantize(raw, info.type_name, info.shape))
    assert {info.type_name for info in gf.tensors} == set(BLOCK_TYPES)


# ---- lookup tables vs gguf.quants -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "ours, gguf_class",
    [
        ("IQ2_XXS_GRID", "IQ2_XXS"),
        ("IQ2_XS_GRID", "IQ2_XS"),
        ("IQ2_S_GRID", "IQ2_S"),
        ("IQ3_XXS_GRID", "IQ3_XXS"),
        ("IQ3_S_GRID", "IQ3_S"),
        ("IQ1_GRID", "IQ1_S"),
        ("IQ1_GRID", "IQ1_M"),
    ],
)
def test_iq_grids_equal_gguf(ours, gguf_class):
    reference = getattr(gguf_quants, gguf_class)
    reference.init_grid()
    grid = getattr(iq_grids, ours)
    assert grid.dtype == np.float32 and grid.shape == reference.grid_shape
    assert np.array_equal(grid.view(np.uint32), reference.grid.reshape(grid.shape).view(np.uint32))


def test_iq_value_tables_equal_gguf():
    assert np.array_equal(iq_grids.SIGN_PATTERNS, np.frombuffer(gguf_quants.IQ2_XXS.ksigns, dtype=np.uint8))
    assert iq_grids.IQ4_NL_VALUES == gguf_quants.IQ4_NL.kvalues
    assert np.float32(iq_grids.IQ1_DELTA) == gguf_quants.IQ1_S.delta == gguf_quants.IQ1_M.delta
    assert tuple(ggml_blocks._FP4_LEVELS) == gguf_quants.MXFP4.kvalues == gguf_quants.NVFP4.kvalues


# ---- types gguf.quants cannot decode: blocks built from known values ------------------------------------


@pytest.mark.parametrize("type_name", NO_GGUF_REFERENCE)
def test_gguf_has_no_reference(type_name):
    # If gguf gains one, move the type to the comparisons above.
    with pytest.raises(NotImplementedError):
        gguf_quants.dequantize(
            np.zeros((1, block_info(type_name)[1]), np.uint8), GGMLQuantizationType[type_name]
        )


KNOWN_SCALES = np.array([0.5, -3.25e-3, 0.0, -0.0, 1e-30, 7.0], dtype=np.float32)  # one per block


def known_int8_codes(n_blocks: int, block_elems: int) -> np.ndarray:
    """(n_blocks, block_elems) int8 covering -128..127 in every block position."""
    return (np.arange(n_blocks * block_elems).reshape(n_blocks, block_elems) * 37 % 256 - 128).astype(np.int8)


def test_q8_k_known_values():
    # ggml block_q8_K: d f32, qs[256] int8, bsums[16] int16 (sums of 16 codes); value = d * q.
    q = known_int8_codes(len(KNOWN_SCALES), 256)
    bsums = q.astype(np.int16).reshape(-1, 16, 16).sum(axis=2, dtype=np.int16)
    raw = np.concatenate(
        [KNOWN_SCALES.view(np.uint8).reshape(-1, 4), q.view(np.uint8), bsums.view(np.uint8)], 1
    )
    expected = KNOWN_SCALES[:, None] * q.astype(np.float32)
    assert_bit_equal(dequantize(raw, "Q8_K", q.shape), expected)


def test_q8_1_known_values():
    # gguf-py's 40-byte block_q8_1: d f32, s f32 (d * sum of q), qs[32] int8; value = d * q.
    q = known_int8_codes(len(KNOWN_SCALES), 32)
    sums = KNOWN_SCALES * q.sum(axis=1).astype(np.float32)
    fields = np.stack([KNOWN_SCALES, sums], axis=1).view(np.uint8)  # (n, 8)
    raw = np.concatenate([fields, q.view(np.uint8)], axis=1)
    expected = KNOWN_SCALES[:, None] * q.astype(np.float32)
    assert_bit_equal(dequantize(raw, "Q8_1", q.shape), expected)


def test_q8_1_ggml_36_byte_layout():
    # ggml itself now writes d and s as f16 (36 bytes); the decoder reads that width too.
    q = known_int8_codes(len(KNOWN_SCALES), 32)
    d = KNOWN_SCALES.astype(np.float16)
    fields = np.stack([d, d * np.float16(3)], axis=1).view(np.uint8)  # (n, 4)
    raw = np.concatenate([fields, q.view(np.uint8)], axis=1)
    out = np.empty(q.shape, dtype=np.float32)
    ggml_blocks._decode_q8_1(raw, out)
    assert_bit_equal(out, d.astype(np.float32)[:, None] * q.astype(np.float32))


def test_q1_0_known_values(rng):
    # ggml block_q1_0: d f16, qs[16], bit j (least significant first) set -> +d, clear -> -d.
    d = KNOWN_SCALES.astype(np.float16)
    bits = rng.integers(0, 2, (len(d), 128), dtype=np.uint8)
    packed = np.packbits(bits, axis=1, bitorder="little")  # (n, 16)
    raw = np.concatenate([d.view(np.uint8).reshape(-1, 2), packed], axis=1)
    d32 = d.astype(np.float32)[:, None]
    assert_bit_equal(dequantize(raw, "Q1_0", bits.shape), np.where(bits == 1, d32, -d32))


# ---- errors ---------------------------------------------------------------------------------------------


def test_wrong_size_names_expected_and_actual_bytes():
    raw = np.zeros(20 * 4 - 1, dtype=np.uint8)
    with pytest.raises(CheckpointError, match=r"needs 80 bytes.* 79 bytes"):
        dequantize(raw, "Q4_1", (2, 64))


def test_row_not_whole_blocks():
    with pytest.raises(CheckpointError, match="not a multiple of 32"):
        dequantize(np.zeros(18, dtype=np.uint8), "Q4_0", (1, 31))


@pytest.mark.parametrize("type_name", ["F64", "I8", "NOT_A_TYPE"])
def test_unsupported_type_names_it(type_name):
    with pytest.raises(UnsupportedError, match=f"GGUF tensor type {type_name} is not supported yet"):
        dequantize(np.zeros(74, dtype=np.uint8), type_name, (1, 256))


# ---- the real SmolLM2 file ------------------------------------------------------------------------------


@pytest.mark.registry
def test_smollm2_every_tensor_equals_gguf(smollm2_gguf):
    from gguf import GGUFReader

    reader = GGUFReader(smollm2_gguf)
    seen = set()
    for tensor in reader.tensors:
        type_name = ggml_type_name(tensor.tensor_type)
        shape = tuple(int(d) for d in reversed(tensor.shape))  # numpy order
        ours = dequantize(tensor.data, type_name, shape)
        theirs = gguf_quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
        assert ours.shape == shape, tensor.name
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), tensor.name
        seen.add(type_name)
    assert seen == {"F32", "Q4_1", "Q8_0"}
