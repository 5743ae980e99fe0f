"""wgpu-only checks: f16 ops against the float64 reference, strided views, dispatch economy, and the Llama
model on wgpu against the numpy backend (tiny random weights; the real SmolLM2 when it is cached)."""

from __future__ import annotations

import numpy as np
import pytest

from tests import reference
from tests.conftest import AVAILABLE_BACKENDS
from tests.tolerances import assert_close

pytestmark = pytest.mark.skipif("wgpu" not in AVAILABLE_BACKENDS, reason="no WebGPU adapter here")


@pytest.fixture(scope="module")
def be():
    from blazr.backends import get_backend

    return get_backend("wgpu")


def normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def f16(a):
    return a.astype(np.float16).astype(np.float32)  # what the device holds after an f16 upload


# ---- f16 ----------------------------------------------------------------------------------------------
F16_CASES = {
    "matmul": lambda r: (normal(r, 7, 33), normal(r, 4097, 33, scale=33**-0.5)),
    "matmul_t1": lambda r: (normal(r, 1, 576), normal(r, 7, 576, scale=576**-0.5)),
    "rms_norm": lambda r: (normal(r, 3, 4097, scale=3.0), normal(r, 4097), 1e-5),
    "softmax": lambda r: (normal(r, 2, 33, scale=5.0),),
    "glu": lambda r: (normal(r, 7, 33), normal(r, 7, 33), "silu"),
    "binary": lambda r: ("mul", normal(r, 7, 33), normal(r, 33)),
    "embed": lambda r: (normal(r, 33, 7), np.array([0, 32, 5, 5], dtype=np.int32)),
    "attention_relative": lambda r: (
        *(normal(r, 40, 2, 96) for _ in range(3)),
        *(normal(r, 9, 96) for _ in range(2)),
        96**-0.5,
    ),  # VITS's text encoder: (T, H, D) q/k/v, W 4
}


@pytest.mark.parametrize("case", list(F16_CASES))
def test_f16_ops_match_the_reference(be, rng, case):
    if "f16" not in be.act_dtypes:
        pytest.skip("adapter without shader-f16")
    op = case.split("_t")[0]
    args = [
        f16(a) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a for a in F16_CASES[case](rng)
    ]
    dev = [be.upload(a, "f16") if isinstance(a, np.ndarray) else a for a in args]
    got = be.download(getattr(be, op)(*dev))
    assert got.dtype == np.float16
    assert_close(op, "f16", got, getattr(reference, op)(*args))


def test_f16_attention_and_rope(be, rng):
    if "f16" not in be.act_dtypes:
        pytest.skip("adapter without shader-f16")
    q, k_cache, v_cache = f16(normal(rng, 5, 4, 16)), f16(normal(rng, 32, 2, 16)), f16(normal(rng, 32, 2, 16))
    tables, ctx, q_lens = np.array([[3, 1, 0]], np.int32), np.array([9], np.int32), np.array([5], np.int32)
    up = [be.upload(a, "f16") for a in (q, k_cache, v_cache)] + [be.upload(a) for a in (tables, ctx, q_lens)]
    got = be.download(be.attention(*up, 4, 0.25))
    assert_close(
        "attention", "f16", got, reference.attention(q, k_cache, v_cache, tables, ctx, q_lens, 4, 0.25)
    )
    positions, inv_freq = np.arange(4, 9, dtype=np.int32), (1e4 ** -(np.arange(8) / 8)).astype(np.float32)
    got = be.download(be.rope(be.upload(q, "f16"), be.upload(positions), be.upload(inv_freq), "neox"))
    assert_close("rope", "f16", got, reference.rope(q, positions, inv_freq, "neox"))


# ---- views --------------------------------------------------------------------------------------------
def test_slices_and_reshapes_are_views_the_ops_read_in_place(be, rng):
    qkv = normal(rng, 7, 5 * 8)  # (T, (H + 2 Hkv) * Dh) with H = 3, Hkv = 1
    dev = be.upload(qkv).reshape(7, 5, 8)
    q, v = dev[:, :3], dev[:, 4:]
    assert q.buf is dev.buf and not q.contiguous and q.rows_contiguous
    assert np.array_equal(be.download(q), qkv.reshape(7, 5, 8)[:, :3])
    assert np.array_equal(be.download(v.reshape(7, 8)), qkv[:, 32:])
    gate_up = be.upload(qkv)
    got = be.download(be.glu(gate_up[:, :20], gate_up[:, 20:], "silu"))
    assert_close("glu", "f32", got, reference.glu(qkv[:, :20], qkv[:, 20:], "silu"))
    assert np.array_equal(be.download(be.upload(qkv)[2, 3:9]), qkv[2, 3:9])
    assert np.array_equal(be.download(be.upload(qkv)[:, ::3]), qkv[:, ::3])


def test_a_scalar_read_back_of_an_odd_f16_slice(be):
    if "f16" not in be.act_dtypes:
        pytest.skip("adapter without shader-f16")
    x = np.arange(9, dtype=np.float32)
    assert be.download(be.upload(x, "f16")[3:4]).tolist() == [3.0]


# ---- the Llama model ------------------------------------------------------------------------------------
def tiny_llama(backend_name):
    from blazr.backends import get_backend
    from blazr.models.llama import Model, ModelArgs
    from tests.tiny_models import tiny_config, tiny_weights

    model = Model(ModelArgs.from_dict(tiny_config("llama")), get_backend(backend_name), "f32")
    model.load_weights(model.sanitize(tiny_weights("llama")))
    return model


def run_greedy(model, prompt, steps, block_size=4):
    """Prefill then greedy decode; returns the ids and the logits of every step."""
    from blazr.models.batch import ForwardBatch

    cache = model.make_cache(16, block_size)
    table = np.arange(16, dtype=np.int32)
    ids, logits, tokens, start = [], [], list(prompt), 0
    for _ in range(steps):
        batch = ForwardBatch.single(tokens, start, table, block_size, all_logits=start == 0)
        out = model.be.download(model(batch, cache))  # (R, V)
        logits.append(out)
        start += len(tokens)
        tokens = [int(np.argmax(out[-1]))]
        ids.append(tokens[0])
    return ids, logits


def test_tiny_llama_on_wgpu_matches_numpy():
    prompt = [1, 17, 99, 3, 250, 8, 61]
    want_ids, want_logits = run_greedy(tiny_llama("cpu"), prompt, 6)
    got_ids, got_logits = run_greedy(tiny_llama("wgpu"), prompt, 6)
    assert got_ids == want_ids
    for got, want in zip(got_logits, want_logits, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_decode_steps_are_one_submit_each_and_reuse_their_bind_groups():
    from blazr.models.batch import ForwardBatch

    model = tiny_llama("wgpu")
    be, cache, table = model.be, model.make_cache(16, 4), np.arange(16, dtype=np.int32)

    def step(tokens, start):
        return be.download(model(ForwardBatch.single(tokens, start, table, 4), cache))

    step([1, 2, 3], 0)
    for pos in range(3, 15):  # warm: the buffer pool settles into a fixed cycle within a few steps
        step([5], pos)
    groups, stats = len(be.rt._bind_groups), be.stats
    before = (stats.submits, stats.bytes_read, stats.dispatches)
    for pos in range(15, 19):
        step([5], pos)
    submits, read, dispatches = (
        stats.submits - before[0],
        stats.bytes_read - before[1],
        stats.dispatches - before[2],
    )
    assert submits == 4  # one per step: its read-back
    assert read == 4 * 4 * model.args.vocab_size  # the logits row, nothing else
    assert dispatches <= 4 * (12 * model.args.num_hidden_layers + 4)
    assert len(be.rt._bind_groups) == groups, "a repeated decode step must reuse its bind groups"


@pytest.mark.registry
@pytest.mark.slow
def test_smollm2_greedy_on_wgpu(smollm2_gguf):
    import blazr

    llm = blazr.load(str(smollm2_gguf), device="wgpu")
    assert llm.generate("The capital of France is", max_tokens=3, temperature=0).startswith(" Paris.")


def test_weights_past_the_binding_limit_are_split_into_row_blocks(be, rng, monkeypatch):
    from blazr.backends.wgpu_array import RowChunks

    monkeypatch.setattr(be.rt, "max_binding", 4096)  # bytes: a (33, 64) f32 table needs 3 blocks
    table, x = normal(rng, 33, 64), normal(rng, 3, 64)
    dev = be.upload(table)
    assert isinstance(dev, RowChunks) and len(dev.parts) == 3 and dev.shape == (33, 64)
    ids = np.array([0, 15, 16, 32, 31], dtype=np.int32)
    assert np.array_equal(be.download(be.embed(dev, be.upload(ids))), table[ids])
    for t in (1, 3):  # the matvec and the tiled kernels
        got = be.download(be.matmul(be.upload(x[:t]), dev))
        assert_close("matmul", "f32", got, reference.matmul(x[:t], table))


def test_a_matmul_whose_features_do_not_match_the_weight_is_refused(be, rng):
    from blazr.errors import UnsupportedError

    w = be.upload(rng.standard_normal((4, 16)).astype(np.float32))
    with pytest.raises(UnsupportedError, match="17 features but the weight has 16"):
        be.matmul(be.upload(rng.standard_normal((2, 17)).astype(np.float32)), w)
