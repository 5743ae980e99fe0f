"""A float16 KV cache on the CPU (blazr.engine.kv_dtype, blazr.backends.half_bits): the widening is exact,
the attention kernels over float16 caches equal the float64 reference of the rounded keys and values, and
the engine picks float16 where it should, holds twice the tokens in the same memory and stays batch-invariant."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.api import LLM
from blazr.backends import get_backend
from blazr.engine.kv_dtype import choose_kv_dtype
from blazr.errors import ConfigError
from tests import reference
from tests.server.conftest import write_tiny_gguf
from tests.test_ops import ALIBI_CASES, ATTENTION_CASES, alibi_slopes, paged_inputs
from tests.tolerances import assert_close

numba = pytest.importorskip("numba")

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py): the widening's shifts
# and bit cast vectorise differently on each
pytestmark = pytest.mark.isa


def cpu_backends():
    from blazr.backends.cpu import Backend

    prompt_pool = Backend()
    prompt_pool._numba_prefill = True  # as after an int8 GEMM: prompts attend on numba's pool
    return {"numba": Backend(), "numba-pool": prompt_pool, "numpy": Backend(fast_kernels=False)}


BACKENDS = cpu_backends()


def test_widen_is_exact_for_every_finite_half():
    from blazr.backends.half_bits import widen

    @numba.njit
    def widen_all(bits, out):
        for i in range(bits.size):
            out[i] = widen(bits[i])

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)  # (65536,) every float16 pattern
    halves = bits.view(np.float16)
    out = np.empty(bits.size, dtype=np.float32)
    widen_all(bits, out)
    finite = np.isfinite(halves)
    assert np.array_equal(out[finite].view(np.uint32), halves[finite].astype(np.float32).view(np.uint32))


def test_narrow_rounds_as_to_half_for_every_kind_of_float(rng):
    """The KV write's in-kernel rounding (half_bits.narrow) equals to_half bit for bit: every float16 value,
    the ties halfway between neighbours (to even), the float16 subnormals and what underflows below them, the
    saturating overflow, random bit patterns over all exponents; a NaN stays a NaN."""
    from blazr.backends.base import to_half
    from blazr.backends.half_bits import narrow

    @numba.njit
    def narrow_all(x, out):
        for i in range(x.size):
            out[i] = narrow(x[i])

    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    exact = halves[np.isfinite(halves)].astype(np.float32)  # every finite float16
    ups = np.nextafter(exact, np.float32(np.inf))
    with np.errstate(over="ignore"):  # 65504's next float16 is inf
        above = np.nextafter(exact.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    ties = ((exact + above) / 2).astype(np.float32)  # halfway to the next float16 (exact in float32)
    x = np.concatenate([
        exact, ups, np.nextafter(exact, np.float32(-np.inf)), ties[np.isfinite(ties)],
        rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.array([1e9, -1e9, np.inf, -np.inf, 65519.0, 65520.0, 6e-8, 3e-8, 2.9e-8, 0.0, -0.0], np.float32),
    ])  # fmt: skip
    out = np.empty(x.size, dtype=np.uint16)
    narrow_all(x, out)
    nan = np.isnan(x)
    assert np.array_equal(out[~nan], to_half(x[~nan]).view(np.uint16))
    assert np.isnan(out[nan].view(np.float16)).all()


def test_to_half_saturates_instead_of_overflowing():
    from blazr.backends.base import to_half

    x = np.array([1e6, -1e6, 65504.0, 1.0 / 3.0, -0.0], dtype=np.float32)
    got = to_half(x)
    assert got.dtype == np.float16 and np.isfinite(got).all()
    assert got.tolist() == [65504.0, -65504.0, 65504.0, np.float16(1.0 / 3.0), 0.0]


@pytest.mark.parametrize("path", list(BACKENDS))
def test_kv_write_rounds_to_half(path, rng):
    be = BACKENDS[path]
    k = rng.standard_normal((5, 2, 8)).astype(np.float32) * 4  # (T, Hkv, Dh)
    v = rng.standard_normal((5, 2, 8)).astype(np.float32)
    k[0, 0, 0] = 1e9  # beyond float16: saturates
    k_cache, v_cache = np.zeros((12, 2, 8), np.float16), np.zeros((12, 2, 8), np.float16)  # (S, Hkv, Dh)
    slots = np.array([3, 0, 11, 7, 4], dtype=np.int32)
    be.kv_write(k_cache, v_cache, k, v, slots)
    assert np.array_equal(k_cache[slots], np.clip(k, -65504, 65504).astype(np.float16))
    assert np.array_equal(v_cache[slots], v.astype(np.float16))


CASES = {f"plain-{name}": (case, False) for name, case in ATTENTION_CASES.items()}
CASES |= {f"alibi-sinks-{name}": (case, True) for name, case in ALIBI_CASES.items()}


@pytest.mark.parametrize("path", list(BACKENDS))
@pytest.mark.parametrize("name", list(CASES))
def test_attention_over_a_half_cache_equals_the_reference_of_its_values(path, name, rng):
    """The kernels read float16 keys and values exactly: the float64 reference over the same rounded values
    is met within float32's tolerance (any error of the widening would be float16-sized, ~1e-3)."""
    (h, hkv, dh, block_size, seqs, shuffled, window, softcap), biased = CASES[name]
    q, k_cache, v_cache, tables, ctx_lens, q_lens = paged_inputs(rng, seqs, h, hkv, dh, block_size, shuffled)
    k_half, v_half = k_cache.astype(np.float16), v_cache.astype(np.float16)  # (S, Hkv, Dh)
    scale = 3.0 * dh**-0.5 if softcap else dh**-0.5
    extra = {"window": window, "softcap": softcap}
    if biased:
        extra |= {"alibi": alibi_slopes(h), "sinks": rng.standard_normal(h).astype(np.float32)}
    args = (tables, ctx_lens, q_lens, block_size, scale)
    got = BACKENDS[path].attention(q, k_half, v_half, *args, **extra)
    assert got.dtype == np.float32
    want = reference.attention(q, k_half.astype(np.float32), v_half.astype(np.float32), *args, **extra)
    assert_close("attention", "f32", got, want)


def test_the_pool_holds_twice_the_tokens_in_the_same_budget(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    f32 = LLM.load(path, num_ctx=64, max_seqs=4, kv_cache_mb=1, kv_cache_type="f32")
    f16 = LLM.load(path, num_ctx=64, max_seqs=4, kv_cache_mb=1, kv_cache_type="f16")
    assert f32.engine.runner.cache[0][0].dtype == np.float32
    assert f16.engine.runner.cache[0][0].dtype == np.float16
    assert f16.engine.pool.num_blocks in (2 * f32.engine.pool.num_blocks, 2 * f32.engine.pool.num_blocks + 1)


def test_exact_activations_keep_float32_and_half_changes_logits_by_rounding_only(tmp_path):
    """A float32 checkpoint computes in exact float: auto keeps its cache float32. Asked for float16, the
    greedy tokens stay and the logits move by float16 rounding only."""
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    auto = LLM.load(path, num_ctx=64)
    assert auto.engine.kv_dtype == "f32" and auto.engine.runner.cache[0][0].dtype == np.float32
    half = LLM.load(path, num_ctx=64, kv_cache_type="f16")
    prompt = [1, 17, 99, 3, 250, 64, 5, 9, 11, 13]
    assert half.generate(prompt, temperature=0, max_tokens=12) == auto.generate(
        prompt, temperature=0, max_tokens=12
    )
    assert np.allclose(first_logits(half, prompt), first_logits(auto, prompt), rtol=0, atol=2e-2)


def first_logits(llm, prompt):
    """Logits (n, V) of every position of the prompt, run as one prefill into the engine's (empty) cache."""
    from blazr.models.batch import ForwardBatch

    n = len(prompt)
    batch = ForwardBatch(
        token_ids=np.array(prompt, np.int32),
        positions=np.arange(n, dtype=np.int32),
        slots=np.arange(n, dtype=np.int32),
        block_tables=np.arange(-(-n // 16), dtype=np.int32)[None],
        ctx_lens=np.array([n], np.int32),
        q_lens=np.array([n], np.int32),
        logits_rows=np.arange(n, dtype=np.int32),
        block_size=16,
    )
    model = llm.engine.model
    return np.asarray(model.be.download(model(batch, llm.engine.runner.cache)))  # (n, V)


def test_packed_weights_with_int8_activations_take_half_by_default(tmp_path):
    from tests.test_quant_models import packed_and_dense

    model, dense = packed_and_dense(tmp_path, "llama", "Q8_0", fast=True)
    model.be.set_int8_activations(True)  # the default where the CPU has an int8 GEMM (not at generic x86)
    assert choose_kv_dtype(model, model.be, None) == "f16"
    assert model.make_cache(1, 4)[0][0].dtype == np.float16
    assert choose_kv_dtype(model, model.be, "f32") == "f32"
    assert model.make_cache(1, 4)[0][0].dtype == np.float32
    model.be.set_int8_activations(False)  # --dtype f32, or a CPU without the int8 GEMM: exact activations
    assert choose_kv_dtype(model, model.be, "auto") == "f32"
    assert choose_kv_dtype(dense, dense.be, "auto") == "f32"  # no numba kernels: no int8 activations


def test_bad_and_unsupported_kinds_are_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ConfigError, match="--kv-cache-type 'q4' is unknown"):
        LLM.load(path, num_ctx=64, kv_cache_type="q4")

    class LatentCache:  # a model whose make_cache takes no dtype (as DeepSeek's latent cache)
        KV_DTYPE_CHOICE = False
        dtype = "f32"

    assert choose_kv_dtype(LatentCache(), get_backend("cpu"), "auto") == "f32"
    with pytest.raises(ConfigError, match="keeps the model's dtype"):
        choose_kv_dtype(LatentCache(), get_backend("cpu"), "f16")

    class PagedCache(LatentCache):
        KV_DTYPE_CHOICE = True
        kv_dtype = None

    class Gpu:  # what choose_kv_dtype reads of a backend: its name
        name = "wgpu"

    assert choose_kv_dtype(PagedCache(), Gpu(), "auto") == "f32"
    with pytest.raises(ConfigError, match="load the model with --dtype f16"):
        choose_kv_dtype(PagedCache(), Gpu(), "f16")


def test_a_half_cache_slot_saves_and_restores(tmp_path):
    """Slot files (and the disaggregated hand-off, which exports the same rows) carry float16 rows: a restored
    conversation continues as a cold run of a float16 engine does."""
    from blazr.engine import Engine
    from tests.test_lora import _IdTokenizer, base_model
    from tests.test_slots import PROMPT, run

    model = base_model("llama", get_backend("cpu"), tmp_path)

    def half_engine():
        return Engine(
            model,
            _IdTokenizer(),
            model.be,
            num_ctx=128,
            block_size=4,
            max_seqs=4,
            num_blocks=64,
            kv_cache_type="f16",
        )

    engine = half_engine()
    assert engine.runner.cache[0][0].dtype == np.float16
    first, _ = run(engine, PROMPT, slot_id="0")
    assert engine.slots.save("0", tmp_path / "conv.slot", "tiny")[0] == 28
    fresh = half_engine()
    fresh.slots.restore("7", tmp_path / "conv.slot", "tiny")
    follow_up = PROMPT + first + [9, 9]
    ids, cached = run(fresh, follow_up)
    assert cached == 28 and ids == run(half_engine(), follow_up)[0]
