"""F16 weights on a wgpu device without shader-f16: stored as two halves a u32 word, unpacked in the matmul and
embed kernels, computed in f32. The backend option f16="packed" opens the device without shader-f16, so these
tests run the same path on an adapter that has it (lavapipe does) as on one that lacks it."""

from __future__ import annotations

import numpy as np
import pytest

from tests import reference
from tests.conftest import AVAILABLE_BACKENDS
from tests.tolerances import assert_close, tolerance

needs_wgpu = pytest.mark.skipif("wgpu" not in AVAILABLE_BACKENDS, reason="no WebGPU adapter here")


@pytest.fixture(scope="module")
def be():
    from blazr.backends import get_backend

    return get_backend("wgpu", f16="packed")


def weight(rng, n, k):
    """An F16 weight (N, K) as the loaders hand it over: float16, scaled so outputs stay near 1."""
    return (rng.standard_normal((n, k)) * k**-0.5).astype(np.float16)


def activations(rng, t, k):
    return rng.standard_normal((t, k)).astype(np.float32)


# ---- the mode -------------------------------------------------------------------------------------------
@needs_wgpu
def test_packed_mode_has_no_f16_arrays_but_keeps_f16_weights_16_bit(be, rng):
    from blazr.backends import get_backend
    from blazr.errors import ConfigError, UnsupportedError

    assert not be.native_f16 and be.act_dtypes == ("f32",)
    assert "shader-f16" not in be.rt.device.features
    assert not be.supports("matmul", "f16")
    w = weight(rng, 33, 64)
    dev = be.upload(w)
    assert dev.dtype == "f16" and dev.shape == (33, 64)
    assert np.array_equal(be.download(dev), w)  # the bytes on the device are the float16 bytes
    assert be.upload(w[0]).dtype == "f32"  # a 1-d weight (norm, bias) is widened: every op reads it
    assert be.upload(w.astype(np.float32)).dtype == "f32"
    with pytest.raises(UnsupportedError, match="without shader-f16"):
        be.upload(w, "f16")
    with pytest.raises(UnsupportedError, match="without shader-f16"):
        be.empty((2, 2), "f16")
    with pytest.raises(ConfigError, match="f16='halves' is unknown"):
        get_backend("wgpu", f16="halves")


# ---- matmul and embed -----------------------------------------------------------------------------------
# (T, N, K): the vec4 kernel (T < 4, K % 4 == 0) and the 4-token tile; N = 1, odd N; odd K puts every other
# weight row on an odd half; K = 4096 + 256 as in a 4k model's MLP.
MATMUL_SHAPES = [
    (1, 1, 64),
    (1, 7, 33),
    (3, 1, 4352),
    (2, 33, 4352),
    (4, 1, 33),
    (7, 9, 33),
    (5, 33, 4352),
    (33, 7, 7),
]


@needs_wgpu
@pytest.mark.parametrize("t,n,k", MATMUL_SHAPES)
def test_matmul_on_f16_storage_matches_the_reference(be, rng, t, n, k):
    x, w = activations(rng, t, k), weight(rng, n, k)
    got = be.download(be.matmul(be.upload(x), be.upload(w)))  # (T, N)
    assert got.dtype == np.float32
    # unpacking is exact, so the sums are those of the same weight uploaded in f32
    same_in_f32 = be.download(be.matmul(be.upload(x), be.upload(w.astype(np.float32))))
    np.testing.assert_allclose(got, same_in_f32, rtol=1e-6, atol=1e-7)
    # the tiled kernel sums K terms in sequence in f32, so its rounding grows like sqrt(K): the table's
    # f32 atol holds up to K = 16 (test_ops reaches K = 4097 only through the vec4 kernel's 4 partial sums)
    rtol, atol = tolerance("matmul", "f32")
    np.testing.assert_allclose(got, reference.matmul(x, w.astype(np.float32)), rtol, atol * (k / 16) ** 0.5)


@needs_wgpu
@pytest.mark.parametrize("vocab,dim,tokens", [(7, 1, 1), (33, 7, 7), (7, 4352, 3), (9, 33, 5)])
def test_embed_on_f16_storage_is_an_exact_row_copy(be, rng, vocab, dim, tokens):
    table = weight(rng, vocab, dim)
    ids = np.concatenate([[0, vocab - 1], rng.integers(0, vocab, tokens)]).astype(np.int32)
    got = be.download(be.embed(be.upload(table), be.upload(ids)))  # (T, D)
    assert got.dtype == np.float32
    assert_close("embed", "f32", got, reference.embed(table.astype(np.float32), ids))


@needs_wgpu
def test_views_of_f16_storage(be, rng):
    """Row slices are read in place (an odd element offset included); other views are widened to f32."""
    w, x = weight(rng, 9, 33), activations(rng, 5, 2 * 33)
    dev, xs = be.upload(w), be.upload(x)[:, 33:]  # x: a strided view, as a qkv slice is
    rows = dev[3:]
    assert rows.dtype == "f16" and rows.offset == 3 * 33
    for t in (1, 5):
        got = be.download(be.matmul(xs[:t], rows))
        assert_close("matmul", "f32", got, reference.matmul(x[:t, 33:], w[3:].astype(np.float32)))
    ids = np.array([0, 5, 2], dtype=np.int32)
    assert np.array_equal(be.download(be.embed(rows, be.upload(ids))), w[3:][ids].astype(np.float32))
    columns = dev[:, 1::2]  # not row-contiguous: matmul reads a widened copy
    assert be.download(columns).dtype == np.float32
    assert np.array_equal(be.download(columns), w[:, 1::2].astype(np.float32))
    got = be.download(be.matmul(be.upload(x[:, :16]), columns))
    assert_close("matmul", "f32", got, reference.matmul(x[:, :16], w[:, 1::2].astype(np.float32)))
    bias = be.download(be.binary("add", xs[:1, :33], dev[4:5]))  # any other op widens its F16 input
    assert_close("binary", "f32", bias, x[:1, 33:] + w[4:5].astype(np.float64))


@needs_wgpu
@pytest.mark.parametrize("k,limit,blocks", [(64, 2048, 3), (63, 1280, 5)])
def test_f16_storage_past_the_binding_limit_is_split_into_row_blocks(be, rng, monkeypatch, k, limit, blocks):
    from blazr.backends.wgpu_array import RowChunks

    monkeypatch.setattr(be.rt, "max_binding", limit)  # bytes: (33, k) halves need `blocks` blocks
    w, x = weight(rng, 33, k), activations(rng, 5, k)
    dev = be.upload(w)
    assert isinstance(dev, RowChunks) and len(dev.parts) == blocks and dev.shape == (33, k)
    assert all(part.dtype == "f16" for part in dev.parts)
    ids = np.array([0, 15, 16, 32], dtype=np.int32)  # (4, K) f32 out stays within the limit
    assert np.array_equal(be.download(be.embed(dev, be.upload(ids))), w[ids].astype(np.float32))
    for t in (1, 5):  # the vec4 and the tiled kernels (odd K: the tiled one for every T)
        got = be.download(be.matmul(be.upload(x[:t]), dev))
        assert_close("matmul", "f32", got, reference.matmul(x[:t], w.astype(np.float32)))


# ---- a model --------------------------------------------------------------------------------------------
def f16_checkpoint(name: str, fmt: str, tmp_path):
    from blazr.loaders import load_checkpoint
    from tests.tiny_models import write_gguf, write_safetensors

    if fmt == "safetensors":
        write_safetensors(name, tmp_path, "float16")
        return load_checkpoint(tmp_path)
    return load_checkpoint(write_gguf(name, tmp_path / f"{name}-f16.gguf", "F16"))


def greedy(model, prompt: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    from blazr.models.batch import ForwardBatch

    cache, table, block_size = model.make_cache(8, 8), np.arange(8, dtype=np.int32), 8
    ids, logits, tokens, start = [], [], list(prompt), 0
    for _ in range(steps):
        batch = ForwardBatch.single(tokens, start, table, block_size, all_logits=start == 0)
        out = np.asarray(model.be.download(model(batch, cache)), dtype=np.float32)  # (R, V)
        logits.append(out)
        start += len(tokens)
        tokens = [int(np.argmax(out[-1]))]
        ids.append(tokens[0])
    return ids, logits


@needs_wgpu
@pytest.mark.parametrize("name,fmt", [("llama", "safetensors"), ("qwen2", "gguf")])
def test_tiny_f16_checkpoint_without_shader_f16_matches_numpy(be, name, fmt, tmp_path):
    """Same greedy ids as the numpy backend, with the 2-d weights stored at 2 bytes a value."""
    from blazr.backends import get_backend
    from blazr.backends.wgpu_device import device_weight_bytes
    from blazr.models import build_model
    from tests.tiny_models import PROMPT_IDS

    ckpt = f16_checkpoint(name, fmt, tmp_path)
    written = be.stats.bytes_written
    model = build_model(ckpt, be)
    written = be.stats.bytes_written - written
    assert model.embed_tokens.weight.dtype == "f16"
    as_f32 = device_weight_bytes(ckpt.tensors, "f32", be.weight_formats)
    as_f16 = device_weight_bytes(ckpt.tensors, "f32", be.weight_formats, f16_storage=True)
    assert as_f16 <= written <= as_f16 + 4096  # the weights, then a few small tables (inv_freq)
    assert written < 0.52 * as_f32, f"{written} bytes uploaded; the weights in f32 take {as_f32}"

    want_ids, want_logits = greedy(build_model(ckpt, get_backend("cpu")), list(PROMPT_IDS), 8)
    got_ids, got_logits = greedy(model, list(PROMPT_IDS), 8)
    assert got_ids == want_ids
    for got, want in zip(got_logits, want_logits, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_wgpu
def test_the_model_fits_check_counts_two_bytes_per_f16_weight(be, tmp_path, monkeypatch):
    from blazr.errors import UnsupportedError
    from blazr.models import build_model

    ckpt = f16_checkpoint("llama", "safetensors", tmp_path)
    n_2d = sum(int(np.prod(t.shape)) for t in ckpt.tensors.values() if len(t.shape) == 2)
    n_1d = sum(int(np.prod(t.shape)) for t in ckpt.tensors.values() if len(t.shape) == 1)
    monkeypatch.setattr(be, "memory_limit", 2 * n_2d + 4 * n_1d)  # fits at 2 bytes, not at 4
    build_model(ckpt, be)
    monkeypatch.setattr(be, "memory_limit", 2 * n_2d + 4 * n_1d - 1)
    with pytest.raises(UnsupportedError, match="the model's weights need"):
        build_model(ckpt, be)


def test_device_weight_bytes_of_f16_storage():
    from blazr.backends.wgpu_device import device_weight_bytes

    tensors = {"w": np.zeros((6, 4), np.float16), "norm": np.zeros(4, np.float16), "b": np.zeros((2, 2))}
    assert device_weight_bytes(tensors, "f32", ()) == 4 * (24 + 4 + 4)
    assert device_weight_bytes(tensors, "f32", (), f16_storage=True) == 2 * 24 + 4 * (4 + 4)
    assert device_weight_bytes(tensors, "f16", (), f16_storage=True) == 2 * (24 + 4 + 4)
