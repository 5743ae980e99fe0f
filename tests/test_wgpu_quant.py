"""Packed GGML weights on the wgpu backend (shaders/matmul_<format>.wgsl, every quant type blazr reads)
against the float64 product of the numpy dequantization of the same blocks, the embedding of packed tables,
row splitting past the binding limit, the IQ codebooks, and the real SmolLM2 (Q4_1 + Q8_0) running with its
weights packed on the device.

Tolerance: activations stay f32 and the weights decode exactly (up to a fused multiply-add in the decode; on
lavapipe every type's embed is bit for bit the numpy dequantization), so the error is f32 rounding of the
sums: NMSE ~1e-14 for every type. The bound 1e-10 is far tighter than design.md's 5e-4.
"""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends.wgpu_device import device_weight_bytes
from blazr.backends.wgpu_quant import PACKED_FORMATS
from blazr.quant import DEQUANT_TYPES, QuantWeight, block_info, stack_rows
from blazr.quant.ggml_blocks import dequantize
from tests.conftest import AVAILABLE_BACKENDS

pytestmark = pytest.mark.skipif("wgpu" not in AVAILABLE_BACKENDS, reason="no WebGPU adapter here")

FORMATS = tuple(sorted(DEQUANT_TYPES - {"F32", "F16", "BF16"}))  # every GGML quant type blazr reads
NMSE_MAX = 1e-10
# (T, N, K): a single row; N not a multiple of the workgroup (64); K = 4096 + 256; T on both sides of the
# matvec / matmul4 switch (4 tokens), including a token count that is not a multiple of 4.
SHAPES = [(1, 1, 256), (1, 65, 512), (3, 7, 4096 + 256), (4, 64, 768), (9, 130, 256)]


@pytest.fixture(scope="module")
def be():
    from blazr.backends import get_backend

    return get_backend("wgpu")


# byte offsets of each type's float scale fields in its block: random bytes there could be inf or NaN
_F16_SCALES = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q1_0": (0,)}
_F16_SCALES |= {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
_F16_SCALES |= {"TQ1_0": (52,), "TQ2_0": (64,), "IQ4_NL": (0,), "IQ4_XS": (0,), "IQ1_S": (0,)}
_F16_SCALES |= {"IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,)}
_F32_SCALES = {"Q8_1": (0, 4), "Q8_K": (0,)}


def random_weight(fmt: str, n: int, k: int, rng) -> QuantWeight:
    """Uniformly random blocks (every code, grid index and sign pattern occurs) whose float scales are set
    to +/- [0.5, 2): finite, and of one magnitude, so that every block counts in the NMSE. NVFP4's e4m3
    scales are finite for every byte."""
    block_elems, block_bytes = block_info(fmt)
    k = block_elems * max(1, k // block_elems)
    raw = rng.integers(0, 256, size=(n, k // block_elems * block_bytes), dtype=np.uint8)
    blocks = raw.reshape(-1, block_bytes)  # a view: the scale fields are written into raw
    count = len(blocks)
    scales = rng.uniform(0.5, 2.0, size=(count, 4)) * rng.choice([-1.0, 1.0], size=(count, 4))
    for i, offset in enumerate(_F16_SCALES.get(fmt, ())):
        blocks[:, offset : offset + 2] = scales[:, i : i + 1].astype(np.float16).view(np.uint8)
    for i, offset in enumerate(_F32_SCALES.get(fmt, ())):
        blocks[:, offset : offset + 4] = scales[:, i : i + 1].astype(np.float32).view(np.uint8)
    if fmt == "MXFP4":  # e8m0 exponent byte: 2^(e - 128) per ggml's half table, here 2^-8 .. 2^7
        blocks[:, 0] = rng.integers(120, 136, size=count)
    if fmt == "IQ1_M":  # d f16 spread over the top nibbles of the four u16 scale words at byte 48
        d_bits = scales[:, 0].astype(np.float16).view(np.uint16)
        words = blocks[:, 48:56].view(np.uint16)  # (count, 4)
        words &= 0x0FFF
        words |= ((d_bits[:, None] >> np.array([0, 4, 8, 12], np.uint16)) & 0xF) << 12
    return QuantWeight(raw, fmt, (n, k))


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sum((got - want) ** 2) / max(np.sum(want**2), 1e-300))


@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_matches_dequantized_f64(be, fmt, rng):
    assert be.supports("matmul", "f32", fmt) and be.supports("embed", "f32", fmt)
    for t, n, k in SHAPES:
        w = random_weight(fmt, n, k, rng)
        x = rng.standard_normal((t, w.shape[1])).astype(np.float32)
        dense = dequantize(w.blocks, fmt, w.shape).astype(np.float64)
        got = be.download(be.matmul(be.upload(x), w))
        assert got.shape == (t, n) and got.dtype == np.float32
        err = nmse(got.astype(np.float64), x.astype(np.float64) @ dense.T)
        assert err <= NMSE_MAX, f"{fmt} {(t, n, k)}: NMSE {err:.2e} > {NMSE_MAX:.0e}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_embed_decodes_the_selected_rows(be, fmt, rng):
    w = random_weight(fmt, 40, 512, rng)
    ids = np.array([3, 0, 39, 3], dtype=np.int32)
    got = be.download(be.embed(w, be.upload(ids)))
    np.testing.assert_allclose(got, dequantize(w.blocks, fmt, w.shape)[ids], rtol=1e-6, atol=1e-6)


def test_strided_activations_and_a_mixed_format_row_stack(be, rng):
    """A Q4_K_M layer's Q4_K q/k + Q6_K v as one weight; x a column slice of a wider array."""
    parts = [random_weight("Q4_K", 32, 512, rng), random_weight("Q6_K", 8, 512, rng)]
    stacked = stack_rows(parts)
    wide = rng.standard_normal((5, 512 + 8)).astype(np.float32)
    got = be.download(be.matmul(be.upload(wide)[:, 8:], stacked))
    dense = np.concatenate([dequantize(p.blocks, p.format, p.shape) for p in parts]).astype(np.float64)
    assert nmse(got.astype(np.float64), wide[:, 8:].astype(np.float64) @ dense.T) <= NMSE_MAX


def test_a_packed_weight_past_the_binding_limit_is_split_into_row_blocks(be, rng, monkeypatch):
    w = random_weight("Q4_0", 50, 256, rng)  # 144 bytes a row
    x = rng.standard_normal((5, 256)).astype(np.float32)
    x_dev, ids_dev = be.upload(x), be.upload(np.array([0, 6, 7, 49], dtype=np.int32))
    monkeypatch.setattr(be.rt, "max_binding", 1024)  # 7 rows a block -> 8 blocks
    dev = be._device_packed(w)  # uploaded once, under the small limit
    monkeypatch.undo()
    assert len(dev.parts) == 8 and sum(p.rows for p in dev.parts) == 50
    dense = dequantize(w.blocks, "Q4_0", w.shape)
    for t in (1, 5):
        got = be.download(be.matmul(x_dev[:t], w))
        assert nmse(got.astype(np.float64), x[:t].astype(np.float64) @ dense.T.astype(np.float64)) <= NMSE_MAX
    got = be.download(be.embed(w, ids_dev))
    np.testing.assert_allclose(got, dense[[0, 6, 7, 49]], rtol=1e-6, atol=1e-6)


def test_f16_models_get_dense_weights(be):
    assert not be.supports("matmul", "f16", "Q4_0")
    assert not be.supports("matmul", "f16", "IQ2_XXS")
    assert not be.supports("matmul_experts", "f16", "Q4_0")
    assert be.supports("matmul_experts", "f32", "Q4_0")  # experts stay packed in f32 models


def test_packed_weights_count_at_their_block_size(be):
    from types import SimpleNamespace

    from blazr.quant import row_bytes

    tensors = {fmt: SimpleNamespace(shape=(3, 512), dtype=fmt, quantized=True) for fmt in FORMATS}
    assert be.weight_formats == PACKED_FORMATS
    assert device_weight_bytes(tensors, "f32", PACKED_FORMATS) == sum(3 * row_bytes(f, 512) for f in FORMATS)
    assert device_weight_bytes(tensors, "f16", PACKED_FORMATS) == len(FORMATS) * 3 * 512 * 2  # dense f16


def test_an_iq_codebook_goes_to_the_device_once(be, rng):
    """IQ1_S and IQ1_M share one codebook buffer; the other formats bind none."""
    x = be.upload(rng.standard_normal((1, 256)).astype(np.float32))
    for fmt in ("IQ1_S", "IQ1_M", "IQ1_S"):
        be.matmul(x, random_weight(fmt, 2, 256, rng))
    codebook = be._codebook("IQ1_S")["codebook"]
    assert be._codebook("IQ1_M")["codebook"] is codebook and codebook.buf.nbytes == 2048 * 8 + 4
    assert be._codebook("Q4_K") == {} and be._codebook("IQ4_XS") == {}


@pytest.mark.registry
@pytest.mark.slow
def test_smollm2_runs_with_its_weights_packed_on_the_device(smollm2_gguf):
    import blazr
    from blazr.quant import QuantWeight

    llm = blazr.load(str(smollm2_gguf), device="wgpu")
    assert llm.generate("The capital of France is", max_tokens=3, temperature=0).startswith(" Paris.")
    model, be = llm.model, llm.model.be
    parts = [model.embed_tokens.weight] + ([] if model.lm_head is None else [model.lm_head.weight])
    for layer in model.layers:
        parts += [
            layer.self_attn.qkv_proj,
            layer.self_attn.o_proj,
            layer.mlp.gate_up_proj,
            layer.mlp.down_proj,
        ]
    packed = {id(w): w for w in parts if isinstance(w, QuantWeight)}.values()
    assert len(packed) == 1 + 4 * len(model.layers)  # every matrix, the tied embedding / LM head once
    host_bytes = sum(w.nbytes for w in packed)
    device_bytes = sum(be._device_packed(w).nbytes for w in packed)
    assert {w.format for w in packed} == {"Q4_1", "Q8_0"}
    assert host_bytes <= device_bytes <= host_bytes + 8 * len(packed)  # packed bytes plus the spare word


def test_a_model_larger_than_the_adapter_memory_is_refused_before_upload(tmp_path, monkeypatch):
    from blazr.backends import get_backend
    from blazr.errors import UnsupportedError
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.tiny_models import write_gguf

    ckpt = load_checkpoint(write_gguf("llama", tmp_path / "tiny.gguf"))
    backend = get_backend("wgpu")
    monkeypatch.setattr(backend, "memory_limit", 64 * 1024)
    uploads = []
    monkeypatch.setattr(backend, "upload", lambda *a, **k: uploads.append(a))
    monkeypatch.setattr(backend, "_upload_packed", lambda *a, **k: uploads.append(a))
    with pytest.raises(
        UnsupportedError, match=r"weights need \d+\.\d MiB on device wgpu:0, but the adapter has 0\.1 MiB"
    ):
        build_model(ckpt, backend)
    assert len(uploads) == 1  # only the model's RoPE frequencies, made before the check; no weight


# ---- fusion (wgpu_fusion.py) ------------------------------------------------------------------------------
def test_a_residual_add_and_the_next_rms_norm_are_one_dispatch(be, rng):
    from tests import reference

    a, b = rng.standard_normal((3, 100)).astype(np.float32), rng.standard_normal((3, 100)).astype(np.float32)
    w = rng.standard_normal(100).astype(np.float32)
    da, db, dw = be.upload(a), be.upload(b), be.upload(w)
    be.sync()
    total = be.binary("add", da, db)
    normed = be.rms_norm(total, dw, 1e-5)
    assert be.rt.pending_count == 1
    np.testing.assert_allclose(be.download(normed), reference.rms_norm(a + b, w, 1e-5), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(be.download(total), a + b)  # the sum is still written


@pytest.mark.parametrize("fmt", ["Q4_1", "IQ3_S"])  # IQ3_S: the fused dispatch keeps the codebook binding
def test_a_packed_gate_up_matvec_and_its_glu_are_one_dispatch(be, fmt, rng):
    from tests import reference

    w = random_weight(fmt, 2 * 70, 256, rng)  # (2F, K), F = 70: not a multiple of the workgroup
    x = (rng.standard_normal((2, 256)) / 64).astype(np.float32)  # the reference silu's exp stays in range
    dx = be.upload(x)
    be.sync()
    gate_up = be.matmul(dx, w)
    h = be.glu(gate_up[:, :70], gate_up[:, 70:], "silu")
    assert be.rt.pending_count == 1
    want = x.astype(np.float64) @ dequantize(w.blocks, fmt, w.shape).T.astype(np.float64)
    assert nmse(be.download(gate_up).astype(np.float64), want) <= NMSE_MAX
    assert (
        nmse(be.download(h).astype(np.float64), reference.glu(want[:, :70], want[:, 70:], "silu")) <= NMSE_MAX
    )
    h2 = be.glu(gate_up[:, 70:], gate_up[:, :70], "silu")  # not the previous dispatch's halves: unfused
    assert (
        nmse(be.download(h2).astype(np.float64), reference.glu(want[:, 70:], want[:, :70], "silu"))
        <= NMSE_MAX
    )
