"""Every op in OPS on every available backend, over a shape grid with sizes 1, 7, 33 and 4097, against the
float64 reference in tests/reference.py, within the table in tests/tolerances.py. The state-space-model ops
(causal_conv1d, ssm_scan) are tested in tests/test_ops_ssm.py."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends import array_api
from blazr.backends.base import ACTIVATIONS, BINARY_OPS, OPS, SampleParams
from tests import reference
from tests.tolerances import assert_close

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py)
pytestmark = pytest.mark.isa


def call(backend, op, *args, **kwargs):
    """Upload the array args, run the op, check it left its inputs alone, download what it returns."""
    dev = [backend.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    before = [
        backend.download(d) if isinstance(a, np.ndarray) else None for a, d in zip(args, dev, strict=True)
    ]
    out = getattr(backend, op)(*dev, **kwargs)
    for i, (d, b) in enumerate(zip(dev, before, strict=True)):
        if b is not None:
            assert np.array_equal(backend.download(d), b), f"{op} changed its input #{i}"
    if isinstance(out, tuple):
        return tuple(backend.download(o) for o in out)
    return backend.download(out)


def check(backend, op, *args, **kwargs):
    got = call(backend, op, *args, **kwargs)
    assert got.dtype == np.float32, f"{op} returned {got.dtype}, not float32"
    assert_close(op, "f32", got, getattr(reference, op)(*args, **kwargs))


def normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- contract and memory --------------------------------------------------------------------------
def test_every_op_exists_and_is_supported_for_f32_dense(backend):
    for op in OPS:
        assert callable(getattr(backend, op, None)), f"{backend.name} lacks {op}"
        assert backend.supports(op) and backend.supports(op, "f32", None), op
        if op not in ("matmul", "embed", "matmul_experts"):  # only these read packed weights
            assert not backend.supports(op, "f32", "Q4_K"), op
    assert not backend.supports("matmul", "f32", "NO_SUCH_FORMAT")
    assert not backend.supports("no_such_op")


def test_upload_casts_floats_and_ints_and_download_copies(backend, rng):
    x = rng.standard_normal((3, 5))  # float64 on the host
    assert backend.download(backend.upload(x)).dtype == np.float32
    assert np.allclose(backend.download(backend.upload(x)), x, rtol=1e-6)
    ids = backend.download(backend.upload(np.arange(4, dtype=np.int64)))
    assert ids.dtype == np.int32 and ids.tolist() == [0, 1, 2, 3]
    dev = backend.upload(x)
    host = backend.download(dev)
    host[:] = 0
    assert backend.download(dev).any(), "download must return a copy"
    assert backend.empty((2, 7)).shape == (2, 7)
    assert backend.download(backend.empty((4,), "i32")).dtype == np.int32
    backend.sync()


# ---- linear algebra ---------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab,dim,tokens", [(7, 1, 1), (33, 7, 7), (7, 4097, 3)])
def test_embed(backend, rng, vocab, dim, tokens):
    ids = rng.integers(0, vocab, tokens).astype(np.int32)
    check(backend, "embed", normal(rng, vocab, dim), ids)


@pytest.mark.parametrize("t,k,n", [(1, 1, 1), (1, 4097, 7), (7, 33, 4097), (33, 7, 33), (1, 576, 1536)])
def test_matmul(backend, rng, t, k, n):
    check(backend, "matmul", normal(rng, t, k), normal(rng, n, k, scale=k**-0.5))


@pytest.mark.parametrize("t,k,n,experts,per_token", [(1, 7, 33, 4, 1), (7, 33, 7, 4, 2), (33, 7, 1, 3, 3)])
def test_matmul_experts(backend, rng, t, k, n, experts, per_token):
    ids = np.stack([rng.choice(experts, per_token, replace=False) for _ in range(t)]).astype(np.int32)
    check(backend, "matmul_experts", normal(rng, t, k), normal(rng, experts, n, k), ids)


# ---- normalisation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("t,d", [(1, 1), (7, 7), (3, 33), (2, 4097)])
def test_rms_norm(backend, rng, t, d):
    x = normal(rng, t, d, scale=3.0)
    check(backend, "rms_norm", x, normal(rng, d), 1e-5)
    # a numpy float64 eps (as read from a config) must not promote the result to float64
    check(backend, "rms_norm", x, normal(rng, d), np.float64(1e-6))


@pytest.mark.parametrize("t,d", [(1, 1), (7, 7), (3, 33), (2, 4097)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(backend, rng, t, d, bias):
    x = normal(rng, t, d, scale=2.0) + 1.5
    check(backend, "layer_norm", x, normal(rng, d), normal(rng, d) if bias else None, 1e-5)


# ---- attention --------------------------------------------------------------------------------------
def inv_freq(rot_dim, base=10000.0):
    return (1.0 / base ** (np.arange(0, rot_dim, 2) / rot_dim)).astype(np.float32)


ROPE_SHAPES = [(1, 1, 2, None), (7, 3, 64, None), (33, 2, 16, 8), (4, 2, 96, 32)]  # (T, H, Dh, rot_dim)


@pytest.mark.parametrize("style", ["neox", "interleaved"])
@pytest.mark.parametrize("t,h,dh,rot_dim", ROPE_SHAPES)
def test_rope(backend, rng, style, t, h, dh, rot_dim):
    positions = rng.integers(0, 5000, t).astype(np.int32)
    positions[0] = 0
    x = normal(rng, t, h, dh)
    check(backend, "rope", x, positions, inv_freq(rot_dim or dh), style, rot_dim)


def test_kv_write(backend, rng):
    s, hkv, dh = 4 * 8, 3, 7
    slots = rng.permutation(s)[:7].astype(np.int32)
    k, v = normal(rng, 7, hkv, dh), normal(rng, 7, hkv, dh)
    k_host, v_host = normal(rng, s, hkv, dh), normal(rng, s, hkv, dh)
    k_cache, v_cache = backend.upload(k_host), backend.upload(v_host)
    backend.kv_write(k_cache, v_cache, backend.upload(k), backend.upload(v), backend.upload(slots))
    reference.kv_write(k_host, v_host, k, v, slots)
    assert_close("kv_write", "f32", backend.download(k_cache), k_host)
    assert_close("kv_write", "f32", backend.download(v_cache), v_host)


def paged_inputs(rng, seqs, h, hkv, dh, block_size, shuffled):
    """q, caches and block tables for sequences [(ctx_len, q_len), ...]; unused slots hold noise."""
    blocks_per_seq = [-(-ctx // block_size) for ctx, _ in seqs]
    num_blocks = sum(blocks_per_seq) + 2
    ids = rng.permutation(num_blocks) if shuffled else np.arange(num_blocks)
    tables = np.full((len(seqs), max(blocks_per_seq)), -1, dtype=np.int32)
    start = 0
    for b, n in enumerate(blocks_per_seq):
        tables[b, :n] = ids[start : start + n]
        start += n
    q_lens = np.array([n for _, n in seqs], dtype=np.int32)
    ctx_lens = np.array([c for c, _ in seqs], dtype=np.int32)
    s = num_blocks * block_size
    q = normal(rng, int(q_lens.sum()), h, dh)
    return q, normal(rng, s, hkv, dh), normal(rng, s, hkv, dh), tables, ctx_lens, q_lens


ATTENTION_CASES = {
    # name: (H, Hkv, Dh, block_size, [(ctx_len, q_len), ...], shuffled, window, softcap)
    "prefill": (4, 4, 16, 4, [(7, 7)], False, 0, 0.0),
    "prefill_gqa3_shuffled": (6, 2, 8, 8, [(33, 33)], True, 0, 0.0),
    "decode_gqa3": (9, 3, 64, 16, [(33, 1)], False, 0, 0.0),
    "decode_gqa4_shuffled": (8, 2, 8, 4, [(70, 1)], True, 0, 0.0),
    "decode_ctx1": (4, 1, 8, 4, [(1, 1)], False, 0, 0.0),
    "batch3_shuffled": (6, 2, 8, 4, [(7, 7), (33, 1), (40, 5)], True, 0, 0.0),
    "batch3_gqa4": (8, 2, 16, 8, [(1, 1), (17, 3), (9, 9)], False, 0, 0.0),
    "chunked_prefill": (3, 3, 8, 4, [(29, 13)], True, 0, 0.0),
    "window_prefill": (4, 2, 8, 4, [(33, 33)], True, 8, 0.0),
    "window_decode": (4, 4, 8, 4, [(40, 1)], False, 5, 0.0),
    "window_batch": (6, 3, 8, 8, [(20, 4), (9, 9), (41, 1)], True, 7, 0.0),
    "softcap": (4, 2, 16, 4, [(20, 4), (12, 12)], True, 0, 5.0),
    # a decode step of several sequences (the cpu backend's one-query kernel): paged, windowed, capped
    "decode_batch4_shuffled": (9, 3, 64, 16, [(33, 1), (1, 1), (70, 1), (16, 1)], True, 0, 0.0),
    "decode_batch_window": (4, 2, 8, 4, [(40, 1), (3, 1), (9, 1)], True, 5, 0.0),
    "decode_batch_softcap": (4, 1, 16, 8, [(20, 1), (12, 1)], True, 0, 5.0),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention(backend, rng, case):
    h, hkv, dh, block_size, seqs, shuffled, window, softcap = ATTENTION_CASES[case]
    inputs = paged_inputs(rng, seqs, h, hkv, dh, block_size, shuffled)
    scale = 3.0 * dh**-0.5 if softcap else dh**-0.5  # a larger scale makes the softcap bite
    check(backend, "attention", *inputs, block_size, scale, window=window, softcap=softcap)


@pytest.fixture
def prompt_pool_backend():
    """The cpu backend as it is once prompts' matmuls run the int8 GEMM on numba's pool: their attention and
    SiLU product then run there too (the parallel numba kernels)."""
    pytest.importorskip("numba")
    from blazr.backends.cpu import Backend

    backend = Backend()
    backend._numba_prefill = True  # as after a cpu_int8_gemm matmul
    return backend


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_on_numbas_pool(prompt_pool_backend, rng, case):
    test_attention(prompt_pool_backend, rng, case)


def test_attention_long_prefill_in_query_chunks(backend, rng, monkeypatch):
    monkeypatch.setattr(array_api, "_ATTN_CHUNK_ELEMS", 200)  # forces ~5-query chunks on the array backends
    inputs = paged_inputs(rng, [(30, 22), (9, 9)], 4, 2, 8, 4, True)
    check(backend, "attention", *inputs, 4, 8**-0.5, window=6)


def alibi_slopes(h):
    """(H,) the geometric ALiBi slopes 2^(-8 (i + 1) / H), reversed so that a head read with another head's
    slope shows: large enough (up to 0.5 per position) that the bias dominates q.k over tens of keys."""
    return (2.0 ** (-8.0 * np.arange(h, 0, -1) / h)).astype(np.float32)


ALIBI_CASES = {
    # name: (H, Hkv, Dh, block_size, [(ctx_len, q_len), ...], shuffled, window, softcap), as ATTENTION_CASES
    "prefill": (4, 4, 16, 4, [(7, 7)], False, 0, 0.0),
    "prefill_gqa3_shuffled": (6, 2, 8, 8, [(33, 33)], True, 0, 0.0),
    "chunked_prefill": (3, 3, 8, 4, [(29, 13)], True, 0, 0.0),
    "decode_gqa4_shuffled": (8, 2, 8, 4, [(70, 1)], True, 0, 0.0),
    "decode_batch4_gqa3": (9, 3, 64, 16, [(33, 1), (1, 1), (70, 1), (16, 1)], True, 0, 0.0),
    "batch3_shuffled": (6, 2, 8, 4, [(7, 7), (33, 1), (40, 5)], True, 0, 0.0),
    "window_prefill": (4, 2, 8, 4, [(33, 33)], True, 8, 0.0),
    "window_decode_batch": (4, 2, 8, 4, [(40, 1), (3, 1), (9, 1)], True, 5, 0.0),
    "softcap": (4, 2, 16, 4, [(20, 4), (12, 12)], True, 0, 5.0),
    "decode_batch_softcap": (4, 1, 16, 8, [(20, 1), (12, 1)], True, 0, 5.0),
    "window_softcap_batch": (6, 3, 8, 8, [(20, 4), (9, 9), (41, 1)], True, 7, 5.0),
}


@pytest.mark.parametrize("case", list(ALIBI_CASES))
def test_attention_alibi(backend, rng, case):
    h, hkv, dh, block_size, seqs, shuffled, window, softcap = ALIBI_CASES[case]
    inputs = paged_inputs(rng, seqs, h, hkv, dh, block_size, shuffled)
    scale = 3.0 * dh**-0.5 if softcap else dh**-0.5
    alibi = alibi_slopes(h)
    check(backend, "attention", *inputs, block_size, scale, window, softcap, alibi)  # alibi uploaded
    # the slopes must move the output, or the comparison above would pass with ALiBi ignored
    plain = reference.attention(*inputs, block_size, scale, window=window, softcap=softcap)
    biased = reference.attention(*inputs, block_size, scale, window=window, softcap=softcap, alibi=alibi)
    assert np.abs(biased - plain).max() > 0.05


@pytest.mark.parametrize("case", list(ALIBI_CASES))
def test_attention_alibi_on_numbas_pool(prompt_pool_backend, rng, case):
    test_attention_alibi(prompt_pool_backend, rng, case)


def test_attention_alibi_long_prefill_in_query_chunks(backend, rng, monkeypatch):
    monkeypatch.setattr(array_api, "_ATTN_CHUNK_ELEMS", 200)  # forces ~5-query chunks on the array backends
    inputs = paged_inputs(rng, [(30, 22), (9, 9)], 4, 2, 8, 4, True)
    check(backend, "attention", *inputs, 4, 8**-0.5, 6, 0.0, alibi_slopes(4))


DENSE_ATTENTION_CASES = {
    # name: (H, Hkv, Dk, Dv, [(q_len, kv_len), ...], causal, window)
    "encoder_one": (4, 4, 16, 16, [(7, 7)], False, 0),
    "encoder_batch_gqa3": (6, 2, 8, 8, [(1, 1), (33, 33), (5, 5)], False, 0),
    "encoder_long": (2, 2, 32, 32, [(300, 300)], False, 0),
    "cross": (4, 2, 16, 16, [(3, 40), (1, 7), (9, 2)], False, 0),
    "dk_ne_dv": (4, 1, 24, 8, [(5, 5), (17, 17)], False, 0),
    "causal_batch": (4, 2, 8, 8, [(7, 7), (33, 33), (1, 1)], True, 0),
    "causal_suffix": (3, 3, 8, 8, [(4, 20), (13, 13)], True, 0),
    "local_window": (4, 2, 8, 8, [(40, 40), (9, 9)], False, 5),
    "causal_window": (4, 4, 8, 8, [(33, 33), (6, 30)], True, 7),
    "blind_queries": (2, 1, 8, 8, [(5, 2)], True, 0),  # the first 3 queries precede every key: zeros
    # the cpu backend's short-sequence kernel (every kv_len <= 128, Dv a multiple of 16)
    "short_batch": (12, 12, 32, 32, "short200", False, 0),  # 200 sequences of 1..80 tokens (all-MiniLM)
    "short_batch_gqa": (12, 4, 32, 32, "short200", False, 0),
    "short_dk_ne_dv": (4, 2, 24, 16, [(5, 5), (17, 17), (128, 128)], False, 0),
    "short_cross": (4, 2, 32, 32, [(3, 40), (1, 7), (9, 2), (0, 5), (20, 0)], False, 0),
    # the cpu backend's BLAS path for long bidirectional sequences (every kv_len >= 512: Whisper's encoder)
    "long_blas": (6, 3, 16, 8, [(600, 600), (1, 512), (0, 530)], False, 0),
    "short_causal": (4, 2, 32, 32, [(7, 7), (33, 33), (1, 1), (4, 20)], True, 0),
    "short_window": (4, 4, 64, 64, [(40, 40), (9, 9), (70, 70)], False, 5),
    "short_causal_window": (4, 1, 32, 32, [(33, 33), (6, 30), (5, 2)], True, 7),
}
_SHORT200 = [(n, n) for n in np.random.default_rng(7).integers(1, 81, 200).tolist()]


def dense_inputs(rng, h, hkv, dk, dv, seqs):
    tq, tk = sum(n for n, _ in seqs), sum(n for _, n in seqs)
    lens = [np.array(c, dtype=np.int32) for c in zip(*seqs, strict=True)]
    return normal(rng, tq, h, dk), normal(rng, tk, hkv, dk), normal(rng, tk, hkv, dv), *lens


@pytest.mark.parametrize("case", list(DENSE_ATTENTION_CASES))
def test_attention_dense(backend, rng, case):
    h, hkv, dk, dv, seqs, causal, window = DENSE_ATTENTION_CASES[case]
    seqs = _SHORT200 if seqs == "short200" else seqs
    check(backend, "attention_dense", *dense_inputs(rng, h, hkv, dk, dv, seqs), dk**-0.5, causal, window)


REL_BIAS_CASES = {
    # name: (H, Hkv, Dk, Dv, [(q_len, kv_len), ...], causal, window, R): MPNet's relative position bias
    "encoder_batch": (4, 4, 16, 16, [(7, 7), (1, 1), (20, 20)], False, 0, 19),
    "clamped_gqa": (6, 2, 8, 8, [(33, 33), (5, 5)], False, 0, 4),  # R below the longest: offsets clamp
    "causal": (4, 2, 8, 8, [(7, 7), (33, 33), (4, 20)], True, 0, 32),
    "cross": (4, 2, 16, 16, [(3, 40), (1, 7), (9, 2)], False, 0, 6),
    "window_long": (2, 1, 16, 16, [(300, 300), (9, 9)], False, 40, 64),  # the tiled cpu kernel, key tiles
    "short_batch_gqa": (12, 4, 32, 32, "short200", False, 0, 79),  # the cpu backend's short kernel
    "short_causal_cross": (4, 2, 32, 32, [(3, 40), (1, 7), (9, 2), (0, 5), (33, 33)], True, 0, 10),
}


@pytest.mark.parametrize("case", list(REL_BIAS_CASES))
def test_attention_dense_rel_bias(backend, rng, case):
    h, hkv, dk, dv, seqs, causal, window, reach = REL_BIAS_CASES[case]
    seqs = _SHORT200 if seqs == "short200" else seqs
    inputs = dense_inputs(rng, h, hkv, dk, dv, seqs)
    rel_bias = normal(rng, h, 2 * reach + 1, scale=2.0)  # (H, 2R + 1)
    check(backend, "attention_dense", *inputs, dk**-0.5, causal, window, rel_bias)


def test_attention_dense_batch_equals_each_alone(backend, rng):
    """A packed batch gives each sequence exactly what it gets alone: no row of one leaks into another."""
    seqs = [(9, 9), (1, 1), (30, 30)]
    q, k, v, q_lens, kv_lens = dense_inputs(rng, 4, 2, 8, 8, seqs)
    batch = call(backend, "attention_dense", q, k, v, q_lens, kv_lens, 8**-0.5)
    start = 0
    for n, _ in seqs:
        one = np.array([n], dtype=np.int32)
        alone = call(backend, "attention_dense", q[start : start + n], k[start : start + n],
                     v[start : start + n], one, one, 8**-0.5)  # fmt: skip
        np.testing.assert_allclose(batch[start : start + n], alone, rtol=1e-6, atol=1e-6)
        start += n


def test_attention_dense_long_in_query_chunks(backend, rng, monkeypatch):
    monkeypatch.setattr(array_api, "_ATTN_CHUNK_ELEMS", 200)  # forces ~5-query chunks on the array backends
    check(backend, "attention_dense", *dense_inputs(rng, 4, 2, 8, 8, [(22, 30), (9, 9)]), 8**-0.5, True, 6)


RELATIVE_CASES = {
    # name: (T, H, D, W, big): VITS's text encoder (D 96, W 4) and smaller heads and windows
    "one_token": (1, 2, 96, 4, False),
    "vits_3": (3, 2, 96, 4, False),
    "vits_7": (7, 2, 96, 4, False),
    "vits_40": (40, 2, 96, 4, False),
    "vits_130": (130, 2, 96, 4, False),
    "d16_w1_1": (1, 2, 16, 1, False),
    "d16_w1_3": (3, 2, 16, 1, False),
    "d16_w1_7": (7, 2, 16, 1, False),
    "d16_w1_40": (40, 2, 16, 1, False),
    "d16_w1_130": (130, 2, 16, 1, False),
    "window_past_t_1": (1, 2, 16, 6, False),  # W > T: only the middle offsets of rel_k/rel_v are reachable
    "window_past_t_3": (3, 2, 16, 6, False),
    "window_past_t_7": (7, 2, 96, 10, False),
    "window_past_t_40": (40, 2, 16, 50, False),
    "big_scores": (40, 2, 16, 4, True),  # scores ~±500: exp overflows float32 unless the max goes first
    "big_scores_d96": (130, 2, 96, 4, True),
}


@pytest.mark.parametrize("case", list(RELATIVE_CASES))
def test_attention_relative(backend, rng, case):
    t, h, d, w, big = RELATIVE_CASES[case]
    q, k, v = normal(rng, t, h, d), normal(rng, t, h, d), normal(rng, t, h, d)
    rel_k, rel_v = normal(rng, 2 * w + 1, d), normal(rng, 2 * w + 1, d)  # (2W + 1, D)
    scale = d**-0.5
    if big:  # small integers and a power-of-two scale: float32 scores are exact, so only stability is tested
        q, k, rel_k = (np.round(a * 12.0) for a in (q, k, rel_k))
        scale = 0.25
    check(backend, "attention_relative", q, k, v, rel_k, rel_v, scale)


def test_attention_relative_strided_inputs(backend, rng):
    """q, k, v as VITS makes them: views into one fused (T, 3, H, D) projection, not contiguous arrays."""
    t, h, d, w = 9, 2, 16, 4
    qkv = backend.upload(normal(rng, t, 3, h, d))
    rel_k, rel_v = normal(rng, 2 * w + 1, d), normal(rng, 2 * w + 1, d)
    views = [qkv[:, i] for i in range(3)]
    got = backend.download(
        backend.attention_relative(*views, backend.upload(rel_k), backend.upload(rel_v), 0.25)
    )
    host = backend.download(qkv)
    want = reference.attention_relative(host[:, 0], host[:, 1], host[:, 2], rel_k, rel_v, 0.25)
    assert_close("attention_relative", "f32", got, want)


def test_attention_relative_is_supported(backend):
    assert backend.supports("attention_relative") and backend.supports("attention_relative", "f32")


# ---- elementwise ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 33), (2, 4097)])
def test_softmax(backend, rng, shape):
    check(backend, "softmax", normal(rng, *shape, scale=30.0))  # large logits test the max subtraction


def wide_range(rng, n, kind=None):
    """n values spanning [-100, 100] plus the small values where activations bend; for exp, [-80, 80]
    (e^x leaves float32's range past 88.7)."""
    x = np.concatenate([rng.uniform(-100, 100, n), rng.uniform(-4, 4, n)]).astype(np.float32)
    return np.clip(x, -80, 80) if kind == "exp" else x


@pytest.mark.filterwarnings("error")  # an overflow in exp must not happen (nor warn)
@pytest.mark.parametrize("kind", ACTIVATIONS)
@pytest.mark.parametrize("n", [1, 7, 33, 4097])
def test_act(backend, rng, kind, n):
    check(backend, "act", wide_range(rng, n, kind).reshape(2, n), kind)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("slope", [0.1, 0.2, 0.0])
def test_act_leaky_relu_slope(backend, rng, slope):
    """HiFi-GAN's leaky_relu(x, 0.1): the slope keyword reaches every kernel (and only leaky_relu reads it)."""
    x = wide_range(rng, 33).reshape(2, 33)
    check(backend, "act", x, "leaky_relu", slope=slope)
    check(backend, "act", x, "relu", slope=slope)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("kind", ACTIVATIONS)
def test_act_on_a_dense_grid(backend, kind):
    """Every 0.0005 over [-30, 30]: where 1 + erf(x) or 1 + tanh(u) cancel (x around -4 to -6) a fast
    approximation is furthest from the float64 value relative to it."""
    check(backend, "act", np.linspace(-30, 30, 120_001, dtype=np.float32).reshape(1, -1), kind)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("kind", ACTIVATIONS)
@pytest.mark.parametrize("t,d", [(1, 1), (7, 33), (1, 4097)])
def test_glu(backend, rng, kind, t, d):
    gate = wide_range(rng, t * d, kind)[: t * d].reshape(t, d)
    check(backend, "glu", gate, normal(rng, t, d), kind)


def test_wavenet_gate(backend, rng):
    """VITS's WaveNet layer: tanh(a) * sigmoid(b) as glu(b, act(a, "tanh"), "sigmoid"), on device."""
    a, b = normal(rng, 7, 192, scale=3.0), normal(rng, 7, 192, scale=3.0)
    got = backend.glu(backend.upload(b), backend.act(backend.upload(a), "tanh"), "sigmoid")
    want = np.tanh(a.astype(np.float64)) / (1.0 + np.exp(-b.astype(np.float64)))
    assert_close("glu", "f32", backend.download(got), want)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("t,d", [(2, 5), (9, 4097)])
def test_silu_product_on_numbas_pool(prompt_pool_backend, rng, t, d):
    gate = wide_range(rng, t * d)[: t * d].reshape(t, d)
    check(prompt_pool_backend, "glu", gate, normal(rng, t, d), "silu")


@pytest.mark.parametrize("op", BINARY_OPS)
@pytest.mark.parametrize("a_shape,b_shape", [((1, 1), (1, 1)), ((7, 33), (33,)), ((3, 4097), (3, 1))])
def test_binary(backend, rng, op, a_shape, b_shape):
    b = normal(rng, *b_shape)
    b += np.where(b >= 0, 0.5, -0.5).astype(np.float32)  # keep divisors away from zero
    check(backend, "binary", op, normal(rng, *a_shape), b)


# ---- selection --------------------------------------------------------------------------------------
@pytest.mark.parametrize("b,n,k", [(1, 1, 1), (3, 7, 3), (2, 33, 33), (2, 4097, 8)])
@pytest.mark.parametrize("ties", [False, True])
def test_topk(backend, rng, b, n, k, ties):
    x = rng.integers(-3, 4, (b, n)).astype(np.float32) if ties else normal(rng, b, n)
    values, idx = call(backend, "topk", x, k)
    want_values, want_idx = reference.topk(x, k)
    assert idx.dtype == np.int32
    assert idx.tolist() == want_idx.tolist()
    assert_close("topk", "f32", values, want_values)


def params(b, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, uniform=0.5):
    def full(value, dtype):
        return np.broadcast_to(np.asarray(value, dtype=dtype), (b,)).copy()  # (B,)

    f32 = np.float32
    return SampleParams(full(temperature, f32), full(top_k, np.int32), full(top_p, f32), full(min_p, f32),
                        full(uniform, np.float64))  # fmt: skip


def sample_ids(backend, logits, p):
    ids = backend.download(backend.sample(backend.upload(logits), p))
    assert ids.dtype == np.int32 and ids.shape == (len(logits),)
    return ids.tolist()


def test_sample_greedy_rows_take_argmax_with_ties_to_lower_id(backend, rng):
    logits = normal(rng, 4, 33)
    logits[1, [5, 9]] = logits[1].max() + 1.0  # a tie: id 5 wins
    p = params(4, temperature=[0.0, 0.0, 0.0, 0.0], uniform=[0.9, 0.1, 0.5, 0.99])
    assert sample_ids(backend, logits, p) == np.argmax(logits, axis=-1).tolist()


@pytest.mark.parametrize("uniform", [0.0, 0.5, 0.999])
def test_sample_top_k_1_is_argmax(backend, rng, uniform):
    logits = normal(rng, 3, 4097, scale=2.0)
    p = params(3, temperature=[0.7, 1.0, 1.5], top_k=1, uniform=uniform)
    assert sample_ids(backend, logits, p) == np.argmax(logits, axis=-1).tolist()


SAMPLE_CASES = [
    # (vocab, logit scale, temperature, top_k, top_p, min_p)
    (7, 1.0, 1.0, 0, 1.0, 0.0),
    (33, 2.0, 0.8, 5, 1.0, 0.0),
    (33, 1.0, 1.2, 0, 0.9, 0.0),
    (33, 3.0, 1.0, 0, 1.0, 0.05),
    (4097, 0.5, 1.0, 0, 1.0, 0.0),  # a flat row: the pick lies past the first candidate prefixes
    (4097, 1.0, 1.0, 0, 0.95, 0.0),
    (4097, 3.0, 0.7, 40, 0.9, 0.02),
    (4097, 1.0, 2.0, 0, 0.8, 0.3),
    (4097, 0.0, 1.0, 0, 1.0, 0.0),  # scale 0: integer logits, so large ties that must go in id order
    (4097, 0.0, 0.5, 100, 0.9, 0.0),
]


@pytest.mark.parametrize("case", SAMPLE_CASES)
def test_sample_fixed_uniform_gives_the_reference_token(backend, rng, case):
    vocab, scale, temperature, top_k, top_p, min_p = case
    uniforms = [0.0, 0.13, 0.52, 0.77, 0.999]  # none on a cumulative boundary of the tie cases
    row = normal(rng, 1, vocab, scale=scale) if scale else rng.integers(-3, 4, (1, vocab)).astype(np.float32)
    logits = np.repeat(row, len(uniforms), axis=0)
    p = params(len(uniforms), temperature, top_k, top_p, min_p, uniforms)
    assert sample_ids(backend, logits, p) == reference.sample(logits, p).tolist()


def test_sample_top_p_and_min_p_keep_only_allowed_tokens(backend):
    logits = np.log(np.array([[0.5, 0.1, 0.25, 0.05, 0.1]], dtype=np.float32))
    uniforms = np.linspace(0.0, 0.999, 40)
    rows = np.repeat(logits, len(uniforms), axis=0)
    top_p = set(sample_ids(backend, rows, params(len(uniforms), top_p=0.7, uniform=uniforms)))
    assert top_p == {0, 2}  # 0.5 + 0.25 reaches 0.7
    min_p = set(sample_ids(backend, rows, params(len(uniforms), min_p=0.3, uniform=uniforms)))
    assert min_p == {0, 2}  # 0.1 < 0.3 * 0.5
    assert set(sample_ids(backend, rows, params(len(uniforms), top_p=0.01, uniform=uniforms))) == {0}


# ---- sequence ---------------------------------------------------------------------------------------
CONV_CASES = [
    # (C_in, L, C_out, Kw, stride, pad, groups)
    (1, 1, 1, 1, 1, 0, 1),
    (4, 33, 6, 3, 1, 1, 1),
    (8, 7, 8, 4, 1, 3, 8),  # depthwise, causal-style padding as in Mamba
    (6, 33, 4, 3, 2, 1, 2),
    (3, 4097, 2, 3, 2, 1, 1),  # strided, as in the Whisper front end
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d(backend, rng, case, bias):
    c_in, length, c_out, kw, stride, pad, groups = case
    w = normal(rng, c_out, c_in // groups, kw)  # (C_out, C_in/g, Kw)
    b = normal(rng, c_out) if bias else None
    check(backend, "conv1d", normal(rng, c_in, length), w, b, stride, pad, groups)


DILATED_CONV_CASES = [
    # (C_in, L, C_out, Kw, stride, pad, groups, dilation)
    (8, 50, 8, 3, 1, 3, 8, 3),  # depthwise, pad = dilation (VITS's DDSConv)
    (8, 50, 8, 3, 1, 9, 8, 9),
    (16, 61, 16, 3, 1, 1, 1, 1),  # HiFi-GAN resblock convs: "same" padding dilation * (Kw - 1) / 2
    (16, 61, 16, 3, 1, 3, 1, 3),
    (16, 61, 16, 3, 1, 5, 1, 5),
    (16, 61, 16, 5, 1, 2, 1, 1),
    (16, 61, 16, 5, 1, 6, 1, 3),
    (16, 61, 16, 5, 1, 10, 1, 5),
    (6, 40, 4, 3, 2, 1, 2, 4),  # strided, grouped, dilated: output shorter than the input
    (4, 7, 2, 3, 1, 0, 1, 3),  # the taps span all 7 columns: one output column
]


@pytest.mark.parametrize("case", DILATED_CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d_dilated(backend, rng, case, bias):
    c_in, length, c_out, kw, stride, pad, groups, dilation = case
    w = normal(rng, c_out, c_in // groups, kw, scale=(c_in // groups * kw) ** -0.5)  # (C_out, C_in/g, Kw)
    b = normal(rng, c_out) if bias else None
    x = normal(rng, c_in, length)
    check(backend, "conv1d", x, w, b, stride, pad, groups, dilation=dilation)


FUSED_CONV_CASES = [
    # (C_in, L, C_out, Kw, stride, pad, groups, dilation)
    (16, 50, 16, 5, 1, 6, 1, 3),
    (8, 40, 12, 3, 2, 1, 1, 1),
    (8, 30, 8, 3, 1, 1, 8, 1),
    # the CPU's direct kernel (blazr.backends.cpu_conv): several column blocks and a ragged last one, output
    # channels not a multiple of its 4-channel tile; a short sequence whose channel tiles are shared out
    (32, 4500, 30, 7, 1, 9, 1, 3),
    (96, 20, 70, 5, 1, 2, 1, 1),
]


@pytest.mark.parametrize("pre_act", [None, "leaky_relu", "sigmoid", "silu"])
@pytest.mark.parametrize("case", FUSED_CONV_CASES)
def test_conv1d_fused_pre_act_and_residual(backend, rng, case, pre_act):
    """act(x) -> conv -> + residual in one call; sigmoid checks that the zero padding is not activated, silu
    (ACTIVATIONS' first kind) that a kind is never taken for "none"."""
    c_in, length, c_out, kw, stride, pad, groups, dilation = case
    w = normal(rng, c_out, c_in // groups, kw, scale=(c_in // groups * kw) ** -0.5)  # (C_out, C_in/g, Kw)
    x, b = normal(rng, c_in, length), normal(rng, c_out)
    l_out = (length + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    residual = normal(rng, c_out, l_out)
    kw_args = {"dilation": dilation, "pre_act": pre_act, "slope": 0.1, "residual": residual}
    check(backend, "conv1d", x, w, b, stride, pad, groups, **kw_args)


CONV_TRANSPOSE_CASES = [
    # (C_in, L, C_out, Kw, stride, pad, groups)
    (512, 20, 256, 16, 8, 4, 1),  # HiFi-GAN V1's upsamplers
    (256, 33, 128, 16, 8, 4, 1),
    (128, 100, 64, 4, 2, 1, 1),
    (1, 1, 1, 1, 1, 0, 1),
    (6, 7, 4, 5, 3, 1, 2),  # grouped, overlapping taps
    (4, 9, 6, 3, 3, 0, 2),  # Kw == stride: no overlap
    (4, 5, 3, 2, 3, 0, 1),  # Kw < stride: gaps of zeros (plus the bias)
    (3, 4, 3, 3, 1, 2, 3),  # depthwise, stride 1, pad past the first tap
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose1d(backend, rng, case, bias):
    c_in, length, c_out, kw, stride, pad, groups = case
    fan_in = c_in // groups * max(1, kw // stride)  # products summed into one output value
    w = normal(rng, c_in, c_out // groups, kw, scale=fan_in**-0.5)  # (C_in, C_out/g, Kw)
    b = normal(rng, c_out) if bias else None
    check(backend, "conv_transpose1d", normal(rng, c_in, length), w, b, stride, pad, groups)


@pytest.mark.parametrize("pre_act", ["leaky_relu", "sigmoid", "silu"])
@pytest.mark.parametrize("case", [(64, 300, 32, 8, 4, 2, 1), (6, 7, 4, 5, 3, 1, 2), (8, 9, 8, 3, 1, 1, 1)])
def test_conv_transpose1d_fused_pre_act(backend, rng, case, pre_act):
    """act(x) -> conv_transpose1d in one call (HiFi-GAN's LeakyReLU before each upsampler); sigmoid: the
    zero padding of the CPU's phases is not activated."""
    c_in, length, c_out, kw, stride, pad, groups = case
    fan_in = c_in // groups * max(1, kw // stride)
    w = normal(rng, c_in, c_out // groups, kw, scale=fan_in**-0.5)  # (C_in, C_out/g, Kw)
    x, b = normal(rng, c_in, length), normal(rng, c_out)
    check(backend, "conv_transpose1d", x, w, b, stride, pad, groups, pre_act=pre_act, slope=0.1)


def test_reference_conv_transpose1d_is_the_adjoint_of_conv1d():
    """The two references agree with each other as PyTorch's ops do: ConvTranspose1d is the adjoint (the
    gradient) of Conv1d with the same weight and stride/padding, and has L_out = (L - 1) stride - 2 pad + Kw."""
    rng = np.random.default_rng(3)
    c_in, c_out, length, kw, stride, pad = 3, 2, 6, 4, 2, 1
    x, w = rng.standard_normal((c_in, length)), rng.standard_normal((c_in, c_out, kw))
    y = reference.conv_transpose1d(x, w, None, stride, pad)
    assert y.shape == (c_out, (length - 1) * stride - 2 * pad + kw)
    z = rng.standard_normal(y.shape)
    # <conv_transpose(x), z> == <x, conv1d(z)> with the same weight read as (C_in, C_out, Kw)
    adjoint = reference.conv1d(z, w, None, stride, pad, 1)
    assert adjoint.shape == x.shape
    assert np.isclose(np.sum(y * z), np.sum(x * adjoint))


@pytest.mark.parametrize("rows", [1, 5, 16, 17])
def test_small_dense_matmuls_on_the_calling_thread(rng, rows):
    """The CPU backend's numba_matmul_rows path (Whisper's decode steps) against the float64 reference."""
    from blazr.backends.cpu import HAS_NUMBA, Backend

    if not HAS_NUMBA:
        pytest.skip("numba is not installed")
    be = Backend()
    be.numba_matmul_rows = 16
    for k, n in ((384, 384), (64, 1536), (33, 7)):
        x, w = normal(rng, rows, k), normal(rng, n, k)
        # float32 sums of k unit-scale products in one order: errors grow like sqrt(k) ulps of the terms
        np.testing.assert_allclose(
            call(be, "matmul", x, w), reference.matmul(x, w), rtol=1e-5, atol=2e-6 * k**0.5
        )


@pytest.mark.parametrize("m,n", [(1, 1), (3, 7), (80, 1500), (384, 1500)])
def test_transpose(backend, rng, m, n):
    check(backend, "transpose", normal(rng, m, n))
    x = normal(rng, m, 2 * n)
    got = backend.download(backend.transpose(backend.upload(x)[:, n:]))  # a device view, row stride 2n
    assert np.array_equal(got, x[:, n:].T)


SINK_CASES = {
    # name: (H, Hkv, Dh, block_size, [(ctx_len, q_len), ...], shuffled, window, softcap), as ATTENTION_CASES
    "prefill_gqa": (4, 2, 16, 4, [(9, 9)], True, 0, 0.0),
    "decode_batch": (8, 2, 8, 4, [(40, 1), (1, 1), (17, 1)], True, 0, 0.0),
    "chunked_window": (4, 1, 8, 4, [(33, 13)], True, 6, 0.0),
    "batch_softcap": (6, 3, 16, 8, [(20, 4), (9, 9), (41, 1)], True, 0, 5.0),
}


@pytest.mark.parametrize("case", list(SINK_CASES))
def test_attention_sinks(backend, rng, case):
    """GPT-OSS's attention sinks: one logit per query head in the softmax's sum, of no value."""
    h, hkv, dh, block_size, seqs, shuffled, window, softcap = SINK_CASES[case]
    inputs = paged_inputs(rng, seqs, h, hkv, dh, block_size, shuffled)
    scale = 3.0 * dh**-0.5 if softcap else dh**-0.5
    sinks = (rng.standard_normal(h) * 2 + 1).astype(np.float32)  # (H,) some above every score, some below
    check(backend, "attention", *inputs, block_size, scale, window, softcap, None, sinks)
    plain = reference.attention(*inputs, block_size, scale, window=window, softcap=softcap)
    sunk = reference.attention(*inputs, block_size, scale, window=window, softcap=softcap, sinks=sinks)
    assert np.abs(sunk - plain).max() > 0.05  # the sinks must move the output


@pytest.mark.parametrize("case", list(SINK_CASES))
def test_attention_sinks_on_numbas_pool(prompt_pool_backend, rng, case):
    test_attention_sinks(prompt_pool_backend, rng, case)


@pytest.mark.parametrize("dh", [320, 576])
def test_attention_wider_than_256_features(backend, rng, dh):
    """DeepSeek's latent attention: one KV head of kv_lora_rank + rope values (576) against the cache."""
    inputs = paged_inputs(rng, [(21, 5), (9, 1)], 4, 1, dh, 8, True)
    check(backend, "attention", *inputs, 8, 0.2 * dh**-0.5)
