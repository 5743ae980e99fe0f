"""ggml's quantizers, byte for byte: blazr's K-quant ports (blazr/convert/k_quants.py) and the `gguf` package's
legacy ones that `blazr convert` writes with, against ggml's own quantize_* functions.

tests/data/ggml_quantize_reference.npz holds 26 blocks of 256 float32 values (weight-like, with outliers,
zero, constant, all-positive, all-negative, fp16-subnormal and large scales, uniform, values on ties) and
what libggml-base (llama.cpp as vendored by llama-cpp-python 0.3.36, built without an importance matrix)
wrote for them with quantize_q4_K / q5_K / q6_K / q8_0 / q4_0 / q4_1 / q5_0 / q5_1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blazr.convert.k_quants import BLOCK_BYTES, quantize_k

REFERENCE = np.load(Path(__file__).parent / "data" / "ggml_quantize_reference.npz")
X = REFERENCE["x"]  # (26, 256) float32


@pytest.mark.parametrize("type_name", sorted(BLOCK_BYTES))
def test_k_quants_equal_ggmls_bytes(type_name):
    ours = quantize_k(X, type_name).reshape(X.shape[0], -1)  # (blocks, bytes)
    theirs = REFERENCE[type_name]
    assert ours.shape == theirs.shape
    bad = np.where((ours != theirs).any(axis=1))[0]
    assert bad.size == 0, f"blocks {bad.tolist()} differ from ggml's"


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_legacy_quants_convert_writes_equal_ggmls_bytes(type_name):
    from gguf import GGMLQuantizationType

    from blazr.convert.to_gguf import _encode

    ours = _encode(X, GGMLQuantizationType[type_name]).reshape(X.shape[0], -1)
    assert (ours == REFERENCE[type_name]).all()


@pytest.mark.parametrize("type_name", sorted(BLOCK_BYTES))
def test_k_quants_read_back_close_to_the_input(type_name):
    """gguf's dequantizer over our blocks gives the values back within the format's resolution, and rows keep
    their shape: (rows, K) floats -> (rows, K/256 * block bytes)."""
    from gguf import GGMLQuantizationType, quants

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 512)) * 0.05).astype(np.float32)
    packed = quantize_k(x, type_name)
    assert packed.shape == (6, 2 * BLOCK_BYTES[type_name])
    back = quants.dequantize(packed, GGMLQuantizationType[type_name])
    error = np.sqrt(np.mean((back - x) ** 2)) / np.sqrt(np.mean(x**2))
    assert error < {"Q4_K": 0.12, "Q5_K": 0.06, "Q6_K": 0.03}[type_name]


def test_rows_that_blocks_do_not_fill_are_refused():
    with pytest.raises(ValueError, match="multiple of 256"):
        quantize_k(np.zeros((2, 320), np.float32), "Q4_K")
