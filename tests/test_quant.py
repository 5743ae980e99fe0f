"""GGML types and numpy dequantization: blazr.quant.ggml_blocks must equal gguf.quants bit for bit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from blazr.errors import CheckpointError, UnsupportedError
from blazr.quant import DEQUANT_TYPES, GGML_TYPES, block_info, ggml_blocks, ggml_type_name, row_bytes
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
}
BLOCK_TYPES = list(F16_FIELDS)
ALL_TYPES = ["F32", "F16", "BF16", *BLOCK_TYPES]
GGUF_QUANTIZES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]  # gguf.quants.quantize


def random_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """n finite f16 values of both signs, moderate and tiny (subnormal) magnitudes, as (n, 2) bytes."""
    values = rng.uniform(-2.0, 2.0, n) * np.where(rng.random(n) < 0.1, 1e-6, 1.0)
    return values.astype(np.float16).view(np.uint8).reshape(n, 2)


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
    for offset in F16_FIELDS[type_name]:
        raw[:, offset : offset + 2] = random_f16(rng, n_blocks)
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


# ---- dequantize vs gguf.quants --------------------------------------------------------------------------


@pytest.mark.parametrize("type_name", ALL_TYPES)
@pytest.mark.parametrize("shape_blocks", [(1, 1), (3, 1), (1, 17), (5, 17), (2, 3, 2)])
def test_random_blocks_equal_gguf(rng, type_name, shape_blocks):
    # The last dim is counted in super-blocks of 256 values so every type gets the same shapes; 17 -> 4352.
    shape = (*shape_blocks[:-1], shape_blocks[-1] * 256)
    raw = random_tensor_bytes(rng, type_name, int(np.prod(shape)))
    assert_bit_equal(dequantize(raw.reshape(-1), type_name, shape), gguf_dequantize(raw, type_name, shape))


@pytest.mark.parametrize("type_name", ["Q4_0", "Q8_0"])
def test_single_small_row(rng, type_name):
    raw = random_tensor_bytes(rng, type_name, 32)
    assert_bit_equal(dequantize(raw, type_name, (1, 32)), gguf_dequantize(raw, type_name, (1, 32)))


class CountingPool(ThreadPoolExecutor):
    submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


@pytest.mark.parametrize("type_name", ["Q4_1", "Q6_K", "BF16"])
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
    assert np.abs(ours - weights).max() < 0.1 * np.abs(weights).max()


# ---- errors ---------------------------------------------------------------------------------------------


def test_wrong_size_names_expected_and_actual_bytes():
    raw = np.zeros(20 * 4 - 1, dtype=np.uint8)
    with pytest.raises(CheckpointError, match=r"needs 80 bytes.* 79 bytes"):
        dequantize(raw, "Q4_1", (2, 64))


def test_row_not_whole_blocks():
    with pytest.raises(CheckpointError, match="not a multiple of 32"):
        dequantize(np.zeros(18, dtype=np.uint8), "Q4_0", (1, 31))


@pytest.mark.parametrize("type_name", ["IQ2_XS", "Q8_1", "TQ1_0", "NOT_A_TYPE"])
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
