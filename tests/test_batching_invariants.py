"""Continuous-batching invariants on real models (the tiny random-weight Llama, float and packed, and the real
SmolLM2), with the default (int8) activations: a batch gives each request exactly the tokens it gets alone
(greedy and seeded, staggered arrivals, mixed lengths, random compositions); chunked prefill equals one-shot
prefill; a prefix-cache hit equals a cold run; preempt-and-recompute equals an uninterrupted run; and every KV
block is free again afterwards. What makes it hold with int8 activations: the decode lane dots round as the
prompt GEMM does (blazr.quant.cpu_int8_lanes), and the per-row kernels get contiguous rows (CPUBackend.glu)."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends import get_backend
from blazr.engine import Engine, SamplingParams

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py)
pytestmark = pytest.mark.isa


class IdTokenizer:
    """Enough tokenizer for the engine: ids decode to themselves; no EOS (random weights)."""

    eos_ids = frozenset()

    def stream(self, skip_special_tokens=False):
        return self

    def push(self, token_id: int) -> str:
        return f"<{token_id}>"

    def flush(self) -> str:
        return ""


def run(engine: Engine, plan: dict[int, list[tuple]]) -> dict[str, list[int]]:
    """Step until done, adding (request_id, prompt, params) at the given steps; tokens per request."""
    plan, got, step = dict(plan), {}, 0
    while engine.has_unfinished() or plan:
        for rid, prompt, params in plan.pop(step, []):
            engine.add_request(rid, prompt, params)
        for out in engine.step():
            got.setdefault(out.request_id, []).extend(out.token_ids)
        step += 1
    assert engine.pool.num_free == engine.pool.num_blocks  # no leaked block
    return got


def check_invariants(
    make, prompts: list[list[int]], shared: list[int], max_tokens: int, prefix_cache: bool = True
) -> None:
    """`make(**engine_kwargs)` builds an Engine on the model; prompts: four of mixed lengths; shared: a
    prompt prefix longer than one block of 16. prefix_cache=False: a model the engine never reuses cached
    blocks for (state-space layers): the second run of a shared prefix must hit nothing and equal a cold one."""
    greedy = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    seeded = SamplingParams(max_tokens=max_tokens, temperature=0.9, top_p=0.95, seed=21)
    jobs = [(f"r{i}", p, greedy if i % 2 == 0 else seeded) for i, p in enumerate(prompts)]
    solo = {rid: run(make(max_seqs=1), {0: [(rid, p, params)]})[rid] for rid, p, params in jobs}

    staggered = run(make(max_seqs=8, max_num_batched_tokens=16), {2 * i: [job] for i, job in enumerate(jobs)})
    assert staggered == solo, "batch != alone"

    rid, prompt, params = jobs[2]
    chunked = run(make(max_seqs=1, prefill_chunk=3), {0: [(rid, prompt, params)]})
    assert chunked[rid] == solo[rid], "chunked prefill != one-shot prefill"

    question = shared + prompts[1]
    cold = run(make(max_seqs=1, enable_prefix_cache=False), {0: [("q", question, seeded)]})["q"]
    warm_engine = make(max_seqs=1)
    run(warm_engine, {0: [("sys", shared + [prompts[0][-1]], greedy)]})
    warm = run(warm_engine, {0: [("q", question, seeded)]})["q"]
    hits = warm_engine.kv.stats.hit_tokens
    assert (hits >= 16 if prefix_cache else hits == 0) and warm == cold, "prefix hit != cold"

    # a pool of one context's blocks for three sequences: the newest are preempted and recomputed
    num_ctx = max(len(p) for p in prompts[:3]) + max_tokens + 2
    tight = make(max_seqs=3, num_ctx=num_ctx, num_blocks=-(-num_ctx // 4), block_size=4)
    preempted = run(tight, {0: jobs[:3]})
    assert tight.scheduler.num_preemptions > 0
    assert preempted == {rid: solo[rid] for rid, _, _ in jobs[:3]}, "preempted != uninterrupted"


# ---- the tiny random-weight Llama ------------------------------------------------------------------------


def test_tiny_llama_invariants():
    from blazr.models.llama import Model, ModelArgs
    from tests.tiny_models import tiny_config, tiny_weights

    model = Model(ModelArgs.from_dict(tiny_config("llama")), get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights("llama")))

    def make(num_ctx=64, **kw):
        return Engine(model, IdTokenizer(), model.be, num_ctx=num_ctx, **kw)

    prompts = [[1, 17, 99, 3, 250], [1, 64], [1, 5, 9, 11, 13, 17, 19, 23, 29, 31, 37], [1, 2, 3]]
    check_invariants(make, prompts, shared=list(range(40, 60)), max_tokens=10)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1"])
def test_tiny_packed_llama_invariants(tmp_path, qtype):
    """The tiny Llama packed to a GGUF type: its matmuls take int8 activations (lane dots for a few tokens,
    the GEMM from cpu_kernels.int8_gemm_min_tokens where the CPU has it: 6 tokens, Q8_0's 28), and still every
    invariant holds exactly. The shared prefix is 32 tokens, so the cold prompt takes Q8_0's GEMM too."""
    from blazr.quant import cpu_kernels
    from tests.test_quant_models import packed_and_dense

    model, _ = packed_and_dense(tmp_path, "llama", qtype, fast=True)
    assert model.be.int8_activations

    def make(num_ctx=64, **kw):
        return Engine(model, IdTokenizer(), model.be, num_ctx=num_ctx, **kw)

    prompts = [[1, 17, 99, 3, 250], [1, 64], [1, 5, 9, 11, 13, 17, 19, 23, 29, 31, 37], [1, 2, 3]]
    shared = list(range(40, 72))
    assert len(shared) + len(prompts[1]) >= cpu_kernels.int8_gemm_min_tokens(qtype)
    check_invariants(make, prompts, shared=shared, max_tokens=10)


def test_glu_rows_do_not_depend_on_the_batch_layout():
    """The CPU backend's gated products on a strided view (the halves of a fused gate|up matmul, as models pass
    them) equal those on contiguous rows, row by row, whatever the number of rows."""
    rng = np.random.default_rng(3)
    be = get_backend("cpu")
    fused = (rng.standard_normal((9, 2 * 200)) * 4).astype(np.float32)  # (T, 2F)
    for kind in ("silu", "gelu_tanh", "gelu"):
        alone = [be.glu(fused[t : t + 1, :200], fused[t : t + 1, 200:], kind)[0] for t in range(9)]
        for rows in (2, 3, 9):
            together = be.glu(fused[:rows, :200], fused[:rows, 200:], kind)
            for t in range(rows):
                np.testing.assert_array_equal(together[t], alone[t], err_msg=f"{kind}, {rows} rows, row {t}")


def test_tiny_llama_n_choices_share_blocks_and_choice_zero_equals_n_1():
    from blazr.models.llama import Model, ModelArgs
    from tests.tiny_models import tiny_config, tiny_weights

    model = Model(ModelArgs.from_dict(tiny_config("llama")), get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights("llama")))
    engine = Engine(model, IdTokenizer(), model.be, num_ctx=64, block_size=4)
    prompt = list(range(1, 20))
    engine.add_request("n", prompt, SamplingParams(max_tokens=8, temperature=1.0, seed=9, n=3))
    choices: dict[int, list[int]] = {}
    while engine.has_unfinished():
        for out in engine.step():
            choices.setdefault(out.index, []).extend(out.token_ids)
    solo = Engine(model, IdTokenizer(), model.be, num_ctx=64, block_size=4)
    assert choices[0] == run(solo, {0: [("one", prompt, SamplingParams(max_tokens=8, seed=9))]})["one"]
    assert len({tuple(c) for c in choices.values()}) == 3  # seeded choices differ from each other
    assert engine.kv.stats.hit_tokens == 2 * 16


# ---- the real SmolLM2-135M-Instruct ----------------------------------------------------------------------


@pytest.mark.registry
def test_smollm2_invariants(smollm2_gguf):
    import blazr

    llm = blazr.load(str(smollm2_gguf), device="cpu")  # default activations: int8 for its Q4_1 / Q8_0

    def make(num_ctx=64, **kw):
        return Engine(llm.model, llm.tokenizer, llm.backend, num_ctx=num_ctx, **kw)

    texts = ["The capital of France is", "def fibonacci(n):", "Water boils at", "Once upon a time, in a"]
    prompts = [llm.tokenize(t) for t in texts]
    system = llm.tokenize("You are a helpful assistant who answers in one short sentence. " * 2)
    check_invariants(make, prompts, shared=system, max_tokens=4)


@pytest.mark.registry
def test_smollm2_random_batch_compositions(smollm2_gguf):
    """Chat requests in random groups, arriving at random steps: each gets its solo greedy text, token for
    token (the CPU-speed issue measured 6-7 of 16 before the decode lane dots and contiguous glu rows)."""
    import random

    import blazr

    llm = blazr.load(str(smollm2_gguf), device="cpu")
    questions = ["What is 2+2?", "Name three colors.", "Write a haiku about rain.", "Who wrote Hamlet?",
                 "What do bees make?", "Say hello in French."]  # fmt: skip
    template = llm.tokenizer.apply_chat_template
    prompts = [
        llm.tokenize(template([{"role": "user", "content": q}], add_generation_prompt=True), False)
        for q in questions
    ]
    greedy = SamplingParams(max_tokens=16, temperature=0.0)

    def make(**kw):
        return Engine(llm.model, llm.tokenizer, llm.backend, num_ctx=128, **kw)

    solo = {
        f"q{i}": run(make(max_seqs=1), {0: [(f"q{i}", p, greedy)]})[f"q{i}"] for i, p in enumerate(prompts)
    }
    pick = random.Random(5)
    for _ in range(3):
        chosen = pick.sample(range(len(prompts)), pick.randint(2, len(prompts)))
        plan: dict[int, list[tuple]] = {}
        for i in chosen:
            plan.setdefault(pick.randint(0, 6), []).append((f"q{i}", prompts[i], greedy))
        got = run(make(max_seqs=8), plan)
        assert got == {f"q{i}": solo[f"q{i}"] for i in chosen}, f"composition {chosen}"


def test_decode_attention_is_the_same_on_the_parallel_kernel():
    """A decode step of many sequences attends on the parallel (prefill) kernel, a few on the serial one
    (CPUBackend.attention): every query's output must be bit for bit the same on both, so a sequence's
    tokens do not depend on how many others share its step."""
    from blazr.backends import cpu, cpu_attention

    rng = np.random.default_rng(8)
    block = 16
    for batch, heads, kv_heads, dh, window, softcap in [(16, 9, 3, 64, 0, 0.0), (9, 8, 2, 128, 7, 0.0),
                                                        (8, 4, 4, 80, 0, 30.0)]:  # fmt: skip
        ctx = rng.integers(1, 90, batch).astype(np.int32)  # (B,) keys per sequence, its query's included
        blocks = int(sum(-(-c // block) for c in ctx))
        order = rng.permutation(blocks)  # scattered blocks, as a pool hands them out
        tables = np.zeros((batch, -(-90 // block)), dtype=np.int32)  # (B, max_blocks)
        used = 0
        for b in range(batch):
            n = -(-int(ctx[b]) // block)
            tables[b, :n], used = order[used : used + n], used + n
        k_cache = rng.standard_normal((blocks * block, kv_heads, dh)).astype(np.float32)  # (S, Hkv, Dh)
        v_cache = rng.standard_normal((blocks * block, kv_heads, dh)).astype(np.float32)  # (S, Hkv, Dh)
        q = rng.standard_normal((batch, heads, dh)).astype(np.float32)  # (B, H, Dh)
        q_lens = np.ones(batch, dtype=np.int32)  # (B,)
        scale = np.float32(dh**-0.5)
        args = (q, k_cache, v_cache, tables, ctx, q_lens, block, scale, window, np.float32(softcap))
        serial, parallel = np.empty_like(q), np.empty_like(q)
        assert cpu_attention.attention_decode(*args, serial)
        cpu_attention.attention_prefill(*args, cpu_attention.NO_ALIBI, cpu_attention.NO_SINKS, parallel)
        np.testing.assert_array_equal(parallel, serial, err_msg=f"{batch} sequences, {heads} heads, {dh}")
        backend = get_backend("cpu")
        backend._numba_prefill = True  # as a model whose matmuls run on numba's pool
        assert batch >= cpu.PARALLEL_DECODE_SEQS
        got = backend.attention(q, k_cache, v_cache, tables, ctx, q_lens, block, dh**-0.5, window, softcap)
        np.testing.assert_array_equal(got, serial)
