"""Engine, scheduler and block pool: a fake model that reads its context back from the paged KV cache (so
wrong positions, slots or block tables change its output), and a tiny random-weight Llama."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import pytest

from blazr.backends import get_backend
from blazr.engine import AsyncEngine, Engine, QueueFullError, SamplingParams
from blazr.errors import ConfigError

EOS = 2
VOCAB = 40


# ---- fakes -----------------------------------------------------------------------------------------------


@dataclass
class FakeArgs:
    vocab_size: int = VOCAB
    max_position_embeddings: int = 256


class FakeModel:
    """Writes token ids into a paged 'KV cache' and predicts the next token from the whole context it reads
    back through the block tables: next = (7 * sum(context) + 3 * len(context)) % (V - 3) + 3, or EOS once a
    sequence is `eos_at` tokens long."""

    def __init__(self, eos_at: int | None = None):
        self.args = FakeArgs()
        self.eos_at = eos_at
        self.calls: list[int] = []  # tokens per forward pass

    def make_cache(self, num_blocks: int, block_size: int):
        return [(np.full(num_blocks * block_size, -1, dtype=np.int64), None)]

    def __call__(self, batch, cache):
        slots_cache = cache[0][0]  # (S,)
        slots_cache[batch.slots] = batch.token_ids
        self.calls.append(len(batch.token_ids))
        seq_ends = np.cumsum(batch.q_lens)
        logits = np.zeros((len(batch.logits_rows), VOCAB), dtype=np.float32)  # (R, V)
        for i, row in enumerate(batch.logits_rows):
            b = int(np.searchsorted(seq_ends, row, side="right"))
            length = int(batch.positions[row]) + 1
            assert length <= batch.ctx_lens[b]
            pos = np.arange(length)
            slots = batch.block_tables[b, pos // batch.block_size] * batch.block_size + pos % batch.block_size
            context = slots_cache[slots]
            assert (context >= 0).all(), "read a cache slot that was never written"
            logits[i] = -5.0
            logits[i, self._next(context)] = 5.0
        return logits

    def _next(self, context: np.ndarray) -> int:
        if self.eos_at is not None and len(context) >= self.eos_at:
            return EOS
        return int((7 * context.sum() + 3 * len(context)) % (VOCAB - 3) + 3)


class FakeStream:
    def __init__(self, tok):
        self.tok = tok

    def push(self, token_id: int) -> str:
        return self.tok.decode([token_id])

    def flush(self) -> str:
        return ""


class FakeTokenizer:
    """Token i decodes to a fixed two-letter piece, so stop strings can span tokens."""

    eos_ids = frozenset({EOS})
    bos_id = 1
    add_bos = False

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"{chr(97 + i % 26)}{chr(65 + i // 26)}" for i in ids)

    def stream(self, skip_special_tokens=False):
        return FakeStream(self)


# ---- helpers ---------------------------------------------------------------------------------------------


def make_engine(model=None, **kw) -> Engine:
    kw.setdefault("num_ctx", 64)
    kw.setdefault("block_size", 4)
    kw.setdefault("max_seqs", 4)
    return Engine(model or FakeModel(), FakeTokenizer(), get_backend("cpu"), **kw)


def run_all(engine: Engine, added_at: dict[int, list[tuple]] | None = None) -> dict[str, dict]:
    """Step until done, adding requests at the given step numbers; collect tokens, text and the end."""
    added_at = dict(added_at or {})
    results: dict[str, dict] = {}
    step = 0
    while engine.has_unfinished() or any(k >= step for k in added_at):
        for request_id, prompt, params in added_at.pop(step, []):
            engine.add_request(request_id, prompt, params)
        for out in engine.step():
            r = results.setdefault(out.request_id, {"ids": [], "text": "", "outputs": []})
            r["ids"] += out.token_ids
            r["text"] += out.text
            r["outputs"].append(out)
        step += 1
        assert step < 1000
    return results


def alone(prompt, params, model_factory=FakeModel, **kw) -> dict:
    engine = make_engine(model_factory(), **kw)
    engine.add_request("solo", prompt, params)
    return run_all(engine)["solo"]


def pool_is_free(engine: Engine) -> bool:
    return engine.pool.num_free == engine.pool.num_blocks


# ---- pool sizing -----------------------------------------------------------------------------------------


def test_pool_is_sized_from_max_seqs_num_blocks_or_a_memory_budget():
    assert make_engine(num_ctx=10, max_seqs=3, block_size=4).pool.num_blocks == 9
    assert make_engine(num_ctx=10, num_blocks=5, block_size=4).pool.num_blocks == 5
    # the fake cache is one int64 per slot: 4 slots * 8 bytes per block
    assert make_engine(num_ctx=10, kv_cache_bytes=32 * 7 + 5, block_size=4).pool.num_blocks == 7
    with pytest.raises(ConfigError, match="kv_cache_bytes"):
        make_engine(num_ctx=64, kv_cache_bytes=100, block_size=4)
    with pytest.raises(ConfigError, match="max_num_batched_tokens=0"):
        make_engine(max_num_batched_tokens=0)


def test_tiny_llama_pool_from_bytes_matches_its_cache_layout():
    model = tiny_llama()
    a = model.args
    per_block = 2 * a.num_hidden_layers * 16 * a.num_key_value_heads * a.head_dim * 4  # k and v, float32
    engine = Engine(model, FakeTokenizer(), model.be, num_ctx=64, kv_cache_bytes=per_block * 10)
    assert engine.pool.num_blocks == 10


def test_default_cpu_pool_stays_within_its_share_of_the_available_ram(monkeypatch):
    """Unset num_blocks and kv_cache_bytes: max_seqs full contexts, capped on the CPU at DEFAULT_KV_RAM_SHARE
    of the available RAM, never below one full context."""
    from blazr.engine import runner

    model = tiny_llama()
    per_block = runner.cache_bytes_per_block(model, 16)
    monkeypatch.setattr(runner, "available_ram_bytes", lambda: None)  # unknown: no cap
    assert Engine(model, FakeTokenizer(), model.be, num_ctx=64, max_seqs=8).pool.num_blocks == 8 * 4
    ram = int(10 * per_block / runner.DEFAULT_KV_RAM_SHARE)
    monkeypatch.setattr(runner, "available_ram_bytes", lambda: ram)  # room for 10 blocks
    assert Engine(model, FakeTokenizer(), model.be, num_ctx=64, max_seqs=8).pool.num_blocks == 10
    assert Engine(model, FakeTokenizer(), model.be, num_ctx=64, max_seqs=2).pool.num_blocks == 8
    monkeypatch.setattr(runner, "available_ram_bytes", lambda: per_block)  # under one context: one context
    assert Engine(model, FakeTokenizer(), model.be, num_ctx=64, max_seqs=8).pool.num_blocks == 4
    explicit = Engine(model, FakeTokenizer(), model.be, num_ctx=64, kv_cache_bytes=per_block * 12)
    assert explicit.pool.num_blocks == 12  # an explicit budget is taken as it is
    monkeypatch.undo()
    assert runner.available_ram_bytes() > 0  # this machine's own reading


# ---- engine with the fake model --------------------------------------------------------------------------


def test_staggered_requests_each_produce_what_they_produce_alone():
    greedy = SamplingParams(max_tokens=7, temperature=0.0)
    seeded = SamplingParams(max_tokens=9, temperature=1.0, seed=11, repeat_penalty=1.2)
    plan = {
        0: [("a", [5, 6, 7], greedy)],
        2: [("b", [9, 9, 9, 9, 9, 9], seeded), ("c", [3], greedy)],
        5: [("d", [11, 12, 13, 14, 15, 16, 17, 18, 19], greedy)],
    }
    engine = make_engine()
    together = run_all(engine, plan)
    for request_id, prompt, params in [x for reqs in plan.values() for x in reqs]:
        solo = alone(prompt, params)
        assert together[request_id]["ids"] == solo["ids"], request_id
        assert together[request_id]["text"] == solo["text"]
        assert len(solo["ids"]) == params.max_tokens
    assert pool_is_free(engine)


def test_chunked_prefill_gives_the_same_tokens():
    params = SamplingParams(max_tokens=6, temperature=0.0)
    prompt = list(range(3, 30))
    engine = make_engine(prefill_chunk=5)
    engine.add_request("r", prompt, params)
    chunked = run_all(engine)["r"]
    assert chunked["ids"] == alone(prompt, params)["ids"]
    assert engine.model.calls[:6] == [5, 5, 5, 5, 5, 2]
    assert pool_is_free(engine)


def test_requests_join_one_batch_and_prefill_chunks_mix_with_decodes():
    engine = make_engine()
    for i in range(3):
        engine.add_request(f"r{i}", [4 + i, 5], SamplingParams(max_tokens=4, temperature=0.0))
    engine.step()
    assert engine.model.calls == [6]  # three prompts in one pass
    engine.add_request("late", list(range(3, 13)), SamplingParams(max_tokens=2, temperature=0.0))
    engine.step()
    assert engine.model.calls[-1] == 3 + 10  # three decode tokens and the new prompt, together
    run_all(engine)
    assert pool_is_free(engine)


def test_token_budget_chunks_long_prompts_and_keeps_decodes_going():
    engine = make_engine(max_num_batched_tokens=6)
    engine.add_request("a", [5, 6], SamplingParams(max_tokens=6, temperature=0.0))
    engine.step()
    engine.add_request("b", list(range(3, 20)), SamplingParams(max_tokens=3, temperature=0.0))
    got = run_all(engine)
    assert engine.model.calls[:5] == [2, 6, 6, 6, 3]  # a decodes every step while b's prompt is chunked
    assert got["b"]["ids"] == alone(list(range(3, 20)), SamplingParams(max_tokens=3, temperature=0.0))["ids"]


def test_max_seqs_limits_the_running_set():
    engine = make_engine(max_seqs=2)
    for i in range(3):
        engine.add_request(f"r{i}", [4 + i, 5], SamplingParams(max_tokens=3, temperature=0.0))
    engine.step()
    assert engine.num_running == 2 and engine.num_waiting == 1
    run_all(engine)
    assert pool_is_free(engine)


def test_abort_frees_blocks_at_once_and_reports_abort():
    engine = make_engine()
    engine.add_request("a", [5, 6, 7, 8, 9], SamplingParams(max_tokens=50, temperature=0.0))
    engine.add_request("b", [5, 6], SamplingParams(max_tokens=50, temperature=0.0))
    for _ in range(4):
        engine.step()
    [seq_a] = engine.scheduler.get("a")
    used_by_a = len(engine.kv.block_table(seq_a))
    free_before = engine.pool.num_free
    engine.abort("a")
    assert used_by_a == 2 and engine.pool.num_free == free_before + used_by_a
    outs = {o.request_id: o for o in engine.step()}
    assert outs["a"].finished and outs["a"].finish_reason == "abort"
    assert not outs["b"].finished
    engine.abort("b")
    engine.abort("unknown")  # ignored
    run_all(engine)
    assert pool_is_free(engine) and not engine.has_unfinished()


def test_abort_of_a_waiting_request():
    engine = make_engine()
    engine.add_request("w", [5, 6], SamplingParams())
    engine.abort("w")
    [out] = engine.step()
    assert out.finish_reason == "abort" and out.completion_tokens == 0
    assert pool_is_free(engine) and not engine.has_unfinished()


def test_max_tokens_finishes_with_length():
    solo = alone([5, 6], SamplingParams(max_tokens=3, temperature=0.0))
    last = solo["outputs"][-1]
    assert len(solo["ids"]) == 3 and last.finished and last.finish_reason == "length"
    assert last.completion_tokens == 3 and last.prompt_tokens == 2
    assert [o.finished for o in solo["outputs"]] == [False, False, True]


def test_eos_finishes_with_stop_and_is_not_emitted():
    solo = alone([5, 6], SamplingParams(max_tokens=20, temperature=0.0), lambda: FakeModel(eos_at=6))
    last = solo["outputs"][-1]
    assert last.finish_reason == "stop" and last.stop_reason is None
    assert len(solo["ids"]) == 4 and EOS not in solo["ids"]  # tokens at lengths 3..6, then EOS
    assert last.completion_tokens == 4 and last.token_ids == []
    ignored = alone(
        [5, 6], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), lambda: FakeModel(6)
    )
    assert ignored["outputs"][-1].finish_reason == "length" and ignored["ids"][4:] == [EOS] * 4


def test_stop_token_ids_finish_with_the_id_as_stop_reason():
    free_run = alone([5, 6], SamplingParams(max_tokens=10, temperature=0.0))["ids"]
    stop_id = free_run[3]
    first = free_run.index(stop_id)
    solo = alone([5, 6], SamplingParams(max_tokens=10, temperature=0.0, stop_token_ids=[stop_id]))
    assert solo["ids"] == free_run[:first]
    assert solo["outputs"][-1].stop_reason == stop_id and solo["outputs"][-1].finish_reason == "stop"


def test_stop_string_split_across_tokens_truncates_the_text():
    params = SamplingParams(max_tokens=10, temperature=0.0)
    full = alone([5, 6], params)
    text = full["text"]
    stop = text[7:10]  # starts inside the 4th token's piece and ends inside the 5th
    engine = make_engine()
    engine.add_request("s", [5, 6], SamplingParams(max_tokens=10, temperature=0.0, stop=[stop]))
    got = run_all(engine)["s"]
    assert got["text"] == text[: text.index(stop)]
    last = got["outputs"][-1]
    assert last.finish_reason == "stop" and last.stop_reason == stop
    assert len(got["ids"]) == 5  # generation stopped at the token that completed the stop string
    assert pool_is_free(engine)


def test_text_held_for_a_possible_stop_string_is_released_at_the_end():
    full = alone([5, 6], SamplingParams(max_tokens=4, temperature=0.0))["text"]
    got = alone([5, 6], SamplingParams(max_tokens=4, temperature=0.0, stop=[full[-1] + "@@"]))
    assert got["text"] == full and got["outputs"][-1].finish_reason == "length"


def test_context_limit_finishes_with_length_and_long_prompts_raise():
    engine = make_engine(num_ctx=16)
    engine.add_request("r", list(range(3, 16)), SamplingParams(max_tokens=100, temperature=0.0))
    got = run_all(engine)["r"]
    assert len(got["ids"]) == 3 and got["outputs"][-1].finish_reason == "length"
    with pytest.raises(ConfigError, match="num_ctx=16"):
        engine.add_request("long", list(range(3, 19)), SamplingParams())
    with pytest.raises(ConfigError, match="num_ctx"):
        make_engine(num_ctx=1000)  # over the model's max_position_embeddings
    assert pool_is_free(engine)


def test_bad_requests_raise_config_errors():
    engine = make_engine()
    with pytest.raises(ConfigError, match="temperature"):
        engine.add_request("r", [5], SamplingParams(temperature=-1.0))
    with pytest.raises(ConfigError, match="vocabulary"):
        engine.add_request("r", [VOCAB + 5], SamplingParams())
    engine.add_request("dup", [5], SamplingParams())
    with pytest.raises(ConfigError, match="dup"):
        engine.add_request("dup", [5], SamplingParams())


def test_negative_seed_means_random_and_a_non_integer_seed_is_refused():
    engine = make_engine()
    engine.add_request("neg", [5, 6], SamplingParams(max_tokens=2, seed=-1))
    assert len(run_all(engine)["neg"]["ids"]) == 2
    with pytest.raises(ConfigError, match="seed"):
        engine.add_request("bad", [5], SamplingParams(seed=1.5))


def test_empty_prompt_finishes_at_once_with_no_tokens():
    engine = make_engine()
    engine.add_request("e", [], SamplingParams())
    [out] = engine.step()
    assert out.finished and out.token_ids == [] and out.text == "" and out.completion_tokens == 0
    assert not engine.has_unfinished() and engine.model.calls == []


def test_logprobs_come_with_each_token():
    solo = alone([5, 6], SamplingParams(max_tokens=3, temperature=0.0, logprobs=2))
    for out in solo["outputs"]:
        [lp] = out.logprobs
        assert lp.token_id == out.token_ids[0] and lp.top[0][0] == lp.token_id and len(lp.top) == 2


def test_prefix_cache_hit_reports_cached_tokens_and_equals_a_cold_run():
    params = SamplingParams(max_tokens=5, temperature=0.0)
    system = list(range(3, 14))  # 11 tokens: two full blocks of 4
    engine = make_engine()
    engine.add_request("first", system + [20, 21], params)
    first = run_all(engine)["first"]
    assert first["outputs"][-1].cached_tokens == 0
    engine.add_request("second", system + [22], params)
    second = run_all(engine)["second"]
    assert second["outputs"][-1].cached_tokens == 8
    assert engine.model.calls[-5] == 12 - 8  # only the uncached tail was prefilled
    assert second["ids"] == alone(system + [22], params)["ids"]
    assert engine.kv.stats.hit_tokens == 8 and pool_is_free(engine)
    off = make_engine(enable_prefix_cache=False)
    off.add_request("a", system + [20, 21], params)
    off.add_request("b", system + [22], params)
    assert [o.cached_tokens for o in run_all(off)["b"]["outputs"]] == [0] * 5


def test_a_multi_turn_chat_reuses_the_blocks_of_the_previous_answer():
    params = SamplingParams(max_tokens=9, temperature=0.0)
    engine = make_engine()
    engine.add_request("turn1", [5, 6, 7], params)
    answer = run_all(engine)["turn1"]["ids"]
    follow_up = [5, 6, 7] + answer + [30, 31]  # 14 tokens; the first 11 were computed in turn 1
    engine.add_request("turn2", follow_up, params)
    got = run_all(engine)["turn2"]
    assert got["outputs"][0].cached_tokens == 8
    assert got["ids"] == alone(follow_up, params)["ids"]


def test_n_choices_share_the_prompt_blocks_and_choice_zero_equals_n_1():
    prompt = list(range(3, 14))
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=4, n=3)
    engine = make_engine(model=FakeModel(), num_ctx=64)
    engine.add_request("multi", prompt, params)
    by_index: dict[int, list[int]] = {0: [], 1: [], 2: []}
    outputs = []
    while engine.has_unfinished():
        for out in engine.step():
            assert out.request_id == "multi"
            by_index[out.index] += out.token_ids
            outputs.append(out)
    assert by_index[0] == alone(prompt, SamplingParams(max_tokens=6, temperature=1.0, seed=4))["ids"]
    assert engine.model.calls[0] == 11 and engine.model.calls[1] == 1 + 2 * 3  # others prefill 3 tokens
    assert sum(o.finished for o in outputs) == 3
    assert {o.cached_tokens for o in outputs if o.index > 0} == {8}
    assert pool_is_free(engine)
    engine.add_request("multi", prompt, params)  # the id is free again once every choice ended
    engine.abort("multi")
    assert sorted(o.index for o in engine.step()) == [0, 1, 2] and pool_is_free(engine)


def test_preemption_recomputes_the_newest_and_gives_the_same_tokens():
    params = SamplingParams(max_tokens=20, temperature=0.0)
    prompts = {"old": [5, 6, 7], "mid": [8, 9], "new": [10, 11, 12, 13]}
    engine = make_engine(num_ctx=32, num_blocks=8, enable_prefix_cache=False)  # 8 blocks of 4: too few
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, params)
    got = run_all(engine)
    assert engine.scheduler.num_preemptions > 0
    for rid, prompt in prompts.items():
        assert got[rid]["ids"] == alone(prompt, params)["ids"], rid
    assert pool_is_free(engine)


def test_the_waiting_queue_is_bounded():
    engine = make_engine(max_waiting=2)
    engine.add_request("a", [5], SamplingParams())
    with pytest.raises(QueueFullError, match="max_waiting=2"):
        engine.add_request("b", [5], SamplingParams(n=2))
    engine.add_request("b", [5], SamplingParams())
    with pytest.raises(QueueFullError):
        engine.add_request("c", [5], SamplingParams())
    engine.step()  # both join the running set
    engine.add_request("c", [5], SamplingParams())


def test_logprobs_per_token_in_a_mixed_batch():
    engine = make_engine()
    engine.add_request("lp", [5, 6], SamplingParams(max_tokens=4, temperature=0.0, logprobs=3))
    engine.add_request("plain", [7, 8, 9], SamplingParams(max_tokens=4, temperature=0.0))
    got = run_all(engine)
    for out in got["lp"]["outputs"]:
        [lp] = out.logprobs
        assert lp.token_id == out.token_ids[0] and len(lp.top) == 3
    assert all(o.logprobs is None for o in got["plain"]["outputs"])


# ---- engine with a tiny random-weight Llama --------------------------------------------------------------


def tiny_llama():
    from blazr.models.llama import Model, ModelArgs
    from tests.tiny_models import tiny_config, tiny_weights

    model = Model(ModelArgs.from_dict(tiny_config("llama")), get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights("llama")))
    return model


def test_tiny_llama_batched_equals_alone():
    model = tiny_llama()
    greedy = SamplingParams(max_tokens=6, temperature=0.0)
    seeded = SamplingParams(max_tokens=6, temperature=0.8, top_p=0.9, seed=3)
    plan = {
        0: [("a", [1, 17, 99, 3, 250], greedy)],
        2: [("b", [1, 64, 128, 7], seeded), ("c", [1, 5], greedy)],
    }
    engine = Engine(model, FakeTokenizer(), model.be, num_ctx=64, block_size=4, max_seqs=4, prefill_chunk=3)
    together = run_all(engine, plan)
    for request_id, prompt, params in [x for reqs in plan.values() for x in reqs]:
        solo_engine = Engine(model, FakeTokenizer(), model.be, num_ctx=64, block_size=16, max_seqs=1)
        solo_engine.add_request(request_id, prompt, params)
        assert together[request_id]["ids"] == run_all(solo_engine)[request_id]["ids"], request_id
    assert pool_is_free(engine)


# ---- AsyncEngine -----------------------------------------------------------------------------------------


async def _collect(engine: AsyncEngine, prompt, params, request_id=None):
    outs = [o async for o in engine.generate(prompt, params, request_id)]
    return [t for o in outs for t in o.token_ids], "".join(o.text for o in outs), outs[-1]


def test_async_engine_streams_concurrent_requests():
    prompts = {"a": [5, 6, 7], "b": [9], "c": [3, 4, 5, 6, 7, 8]}
    params = SamplingParams(max_tokens=6, temperature=0.0)

    async def main(engine):
        return await asyncio.gather(*(_collect(engine, p, params, rid) for rid, p in prompts.items()))

    engine = AsyncEngine(make_engine())
    try:
        results = asyncio.run(main(engine))
    finally:
        engine.shutdown()
    for (rid, prompt), (ids, text, last) in zip(prompts.items(), results, strict=True):
        solo = alone(prompt, params)
        assert ids == solo["ids"] and text == solo["text"] and last.finish_reason == "length", rid
    assert pool_is_free(engine.engine)


def _wait_until(predicate, timeout=5.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_async_generate_aborts_when_the_consumer_stops_or_is_cancelled():
    params = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)

    async def close_early(engine):
        stream = engine.generate([5, 6], params, "closed")
        got = [await stream.__anext__(), await stream.__anext__()]
        await stream.aclose()
        return got

    async def cancel_task(engine):
        started = asyncio.Event()

        async def consume():
            async for _ in engine.generate([7, 8], params, "cancelled"):
                started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    engine = AsyncEngine(make_engine(num_ctx=256))
    try:
        assert len(asyncio.run(close_early(engine))) == 2
        asyncio.run(cancel_task(engine))
        inner = engine.engine
        assert _wait_until(lambda: not inner.has_unfinished() and pool_is_free(inner))
    finally:
        engine.shutdown()


def test_async_add_request_raises_config_errors_at_the_call():
    async def main(engine):
        with pytest.raises(ConfigError, match="num_ctx"):
            async for _ in engine.generate(list(range(3, 70)), SamplingParams()):
                pass

    engine = AsyncEngine(make_engine())
    try:
        asyncio.run(main(engine))
    finally:
        engine.shutdown()
