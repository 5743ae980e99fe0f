"""The block pool, the KV-cache manager with its prefix cache, and the continuous-batching scheduler, driven by
a fake runner (pure Python: no backend, no model). The fake runner keeps token ids in a paged slot array and
predicts the next token from the whole context it reads back through the block tables, so a wrong table, slot,
shared block or recomputation changes the output. A hypothesis fuzz runs many random schedules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blazr.engine.block_pool import BlockPool, OutOfBlocksError
from blazr.engine.kv_cache import KVCacheManager
from blazr.engine.prefix_cache import block_key, extend_block_keys
from blazr.engine.request import FinishReason, Request, SamplingParams
from blazr.engine.sampling import make_rng
from blazr.engine.scheduler import QueueFullError, ScheduledBatch, Scheduler
from blazr.engine.state_pool import StatePool

VOCAB = 50


def next_token(context: list[int] | np.ndarray) -> int:
    return int((7 * int(np.sum(context)) + 3 * len(context)) % (VOCAB - 3) + 3)


class FakeRunner:
    """Writes each scheduled token into its slot and, for sampling sequences, reads the context back."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.slots = np.full(num_blocks * block_size, -1, dtype=np.int64)  # (S,)

    def execute(self, batch: ScheduledBatch) -> dict[Request, int]:
        bs, sampled = self.block_size, {}
        for seq in batch.seqs:
            table = np.asarray(seq.block_table)
            pos = np.arange(seq.start, seq.start + len(seq.token_ids))
            self.slots[table[pos // bs] * bs + pos % bs] = seq.token_ids
        for seq in batch.seqs:  # read after all writes, as attention runs after kv_write
            if seq.sample:
                table = np.asarray(seq.block_table)
                pos = np.arange(seq.start + len(seq.token_ids))
                context = self.slots[table[pos // bs] * bs + pos % bs]
                assert (context >= 0).all(), "read a slot that was never written"
                sampled[seq.request] = next_token(context)
        return sampled


class FakeStateRunner(FakeRunner):
    """A recurrent model: each state slot holds every token its sequence fed so far (a state-space layer's
    state, which depends on all of them); the next token comes from that state alone, never from the KV slots.
    A slot that two sequences share, or one not started afresh at position 0, changes the output."""

    def __init__(self, num_blocks: int, block_size: int, num_slots: int):
        super().__init__(num_blocks, block_size)
        self.states: list[list[int] | None] = [None] * num_slots

    def execute(self, batch: ScheduledBatch) -> dict[Request, int]:
        slots = [seq.state_slot for seq in batch.seqs]
        assert None not in slots and len(set(slots)) == len(slots), "state slots missing or shared in a step"
        sampled = {}
        for seq in batch.seqs:
            if seq.start == 0:
                self.states[seq.state_slot] = []
            state = self.states[seq.state_slot]
            assert state is not None and len(state) == seq.start, (
                "a state that does not hold the sequence so far"
            )
            state.extend(seq.token_ids)
            if seq.sample:
                sampled[seq.request] = next_token(state)
        return sampled


def reference(prompt: list[int], max_tokens: int, num_ctx: int) -> list[int]:
    ids, out = list(prompt), []
    while True:
        out.append(next_token(ids))
        ids.append(out[-1])
        if len(out) >= max_tokens or len(ids) >= num_ctx:
            return out


def make_request(rid: str, prompt: list[int], max_tokens: int = 8) -> Request:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return Request(rid, list(prompt), params, rng=make_rng(0))


def make_scheduler(num_blocks=16, block_size=4, num_ctx=32, max_seqs=4, budget=64, **kw):
    """A scheduler and its fake runner; states=True: a recurrent model's (state slots, no prefix cache)."""
    if kw.pop("states", False):
        kv = KVCacheManager(BlockPool(num_blocks, block_size), enable_prefix_cache=False)
        kw.pop("prefix", None)
        scheduler = Scheduler(
            kv, num_ctx, max_seqs, max_num_batched_tokens=budget, states=StatePool(max_seqs), **kw
        )
        return scheduler, FakeStateRunner(num_blocks, block_size, max_seqs)
    kv = KVCacheManager(BlockPool(num_blocks, block_size), kw.pop("prefix", True))
    return Scheduler(kv, num_ctx, max_seqs, max_num_batched_tokens=budget, **kw), FakeRunner(
        num_blocks, block_size
    )


def drive(scheduler: Scheduler, runner: FakeRunner, max_steps: int = 500) -> int:
    steps = 0
    while scheduler.has_unfinished():
        batch = scheduler.schedule()
        scheduler.update(batch, runner.execute(batch))
        scheduler.kv.pool.check_consistent(scheduler.kv.holders())
        steps += 1
        assert steps < max_steps
    return steps


# ---- block pool ------------------------------------------------------------------------------------------


def test_pool_hands_out_plain_blocks_first_then_evicts_the_least_recently_freed_cached():
    pool = BlockPool(3, 4)
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    assert (a, b, c) == (0, 1, 2) and pool.num_free == 0
    with pytest.raises(OutOfBlocksError):
        pool.allocate()
    assert pool.register(a, b"ka") and pool.register(b, b"kb")
    assert not pool.register(c, b"ka")  # that content is cached in another block already
    pool.release(b)
    pool.release(a)
    pool.release(c)
    assert pool.num_free == 3 and pool.num_cached == 2
    assert pool.allocate() == c  # plain first
    assert pool.allocate() == b and pool.lookup(b"kb") is None  # b was freed before a: evicted first
    assert pool.lookup(b"ka") == a
    pool.share(a)  # a cached free block comes back with its content
    assert pool.ref_counts[a] == 1 and pool.num_free == 0
    with pytest.raises(RuntimeError, match="released more often"):
        pool.release(a) or pool.release(a)


def test_block_keys_chain_the_whole_prefix():
    assert block_key(None, [1, 2]) == block_key(None, [1, 2])
    assert block_key(block_key(None, [1, 2]), [3, 4]) != block_key(block_key(None, [9, 2]), [3, 4])
    keys = extend_block_keys([], list(range(10)), 4, 2)
    assert len(keys) == 2 and extend_block_keys(keys, list(range(10)), 4, 2) == keys


# ---- KV cache manager ------------------------------------------------------------------------------------


def test_manager_grows_tables_and_a_failed_allocation_takes_nothing():
    kv = KVCacheManager(BlockPool(3, 4))
    assert kv.allocate("a", 5) == [0, 1] and kv.allocate("a", 8) == [0, 1]
    assert kv.allocate("b", 1) == [2]
    with pytest.raises(OutOfBlocksError, match="'a'"):
        kv.allocate("a", 9)
    assert kv.block_table("a") == [0, 1]
    kv.free("a")
    kv.free("b")
    assert kv.pool.num_free == 3


def test_prefix_match_shares_computed_blocks_and_leaves_the_last_token():
    kv = KVCacheManager(BlockPool(8, 4))
    tokens = list(range(12))
    keys = extend_block_keys([], tokens, 4, 3)
    kv.allocate("a", 12)
    kv.commit("a", keys, 12)
    assert kv.match_prefix("b", keys, 12) == 8  # 3 full blocks cached, but the last token must run
    assert kv.block_table("b") == kv.block_table("a")[:2]
    assert kv.pool.ref_counts[kv.block_table("a")[0]] == 2
    kv.free("a")
    kv.free("b")
    assert kv.match_prefix("c", keys, 13) == 12 and kv.pool.num_free == 5  # found again after both left
    off = KVCacheManager(BlockPool(8, 4), enable_prefix_cache=False)
    off.allocate("a", 12)
    off.commit("a", keys, 12)
    assert off.match_prefix("b", keys, 12) == 0


# ---- scheduler with the fake runner ----------------------------------------------------------------------


def test_scheduler_runs_staggered_requests_to_their_reference_outputs():
    scheduler, runner = make_scheduler(budget=5, prefill_chunk=3)
    requests = [make_request(f"r{i}", [3 + i] * (2 + 3 * i), 6) for i in range(4)]
    for r in requests:
        scheduler.add(r)
    drive(scheduler, runner)
    for r in requests:
        assert r.output_ids == reference(r.prompt_ids, 6, 32) and r.finish_reason is FinishReason.LENGTH
    assert scheduler.kv.pool.num_free == 16


def test_budget_max_seqs_and_preemption_order():
    scheduler, runner = make_scheduler(num_blocks=8, num_ctx=32, max_seqs=3, budget=4, prefix=False)
    requests = [make_request(f"r{i}", [5 + i, 6], 20) for i in range(4)]
    for r in requests:
        scheduler.add(r)
    first = scheduler.schedule()
    assert first.num_tokens == {"r0": 2, "r1": 2}  # the budget of 4 stops r2; max_seqs would stop r3
    scheduler.update(first, runner.execute(first))
    preempted = []
    while scheduler.has_unfinished():
        batch = scheduler.schedule()
        assert sum(len(s.token_ids) for s in batch.seqs) <= 4 and len(scheduler.running) <= 3
        preempted += [r.request_id for r in batch.preempted]
        scheduler.update(batch, runner.execute(batch))
    assert preempted and "r0" not in preempted  # the oldest is never the victim while others run
    for r in requests:
        assert r.output_ids == reference(r.prompt_ids, 20, 32)


def test_waiting_queue_limit_raises_queue_full():
    scheduler, _ = make_scheduler(max_waiting=1)
    scheduler.check_capacity(1)
    scheduler.add(make_request("a", [5]))
    with pytest.raises(QueueFullError, match="max_waiting=1"):
        scheduler.check_capacity(1)


# ---- fuzz: random schedules ------------------------------------------------------------------------------

PREFIXES = [[], [4, 5, 6, 7, 8, 9], [4, 5, 6, 7, 10, 11, 12]]


@st.composite
def schedules(draw):
    block_size = draw(st.integers(1, 4))
    num_ctx = draw(st.integers(8, 24))
    per_seq = -(-num_ctx // block_size)
    config = {
        "block_size": block_size,
        "num_ctx": num_ctx,
        "num_blocks": draw(st.integers(per_seq, 3 * per_seq)),
        "max_seqs": draw(st.integers(1, 5)),
        "budget": draw(st.integers(1, 20)),
        "prefill_chunk": draw(st.one_of(st.none(), st.integers(1, 6))),
        "prefix": draw(st.booleans()),
        "states": draw(st.booleans()),
    }
    reqs = []
    for i in range(draw(st.integers(1, 8))):
        prefix = draw(st.sampled_from(PREFIXES))
        tail = draw(st.lists(st.integers(3, VOCAB - 1), min_size=1, max_size=6))
        prompt = (prefix + tail)[: num_ctx - 1]
        abort_at = draw(st.one_of(st.none(), st.integers(0, 30)))
        reqs.append((f"r{i}", prompt, draw(st.integers(1, 12)), draw(st.integers(0, 15)), abort_at))
    return config, reqs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules())
def test_random_schedules_match_the_reference_and_free_every_block(plan):
    config, reqs = plan
    scheduler, runner = make_scheduler(**config)
    made = {rid: make_request(rid, prompt, max_tokens) for rid, prompt, max_tokens, _, _ in reqs}
    step = 0
    while scheduler.has_unfinished() or any(arrive >= step for _, _, _, arrive, _ in reqs):
        for rid, _, _, arrive, abort_at in reqs:
            if arrive == step:
                scheduler.add(made[rid])
            if abort_at == step:
                scheduler.abort(rid)
        batch = scheduler.schedule()
        if batch is not None:
            assert sum(len(s.token_ids) for s in batch.seqs) <= config["budget"]
            assert len(scheduler.running) <= config["max_seqs"]
            if config["states"]:
                assert set(scheduler.states.holders()) == set(scheduler.running)
            scheduler.update(batch, runner.execute(batch))
        scheduler.kv.pool.check_consistent(scheduler.kv.holders())
        step += 1
        assert step < 2000
    assert scheduler.kv.pool.num_free == config["num_blocks"]  # no leak
    if config["states"]:
        assert scheduler.states.num_free == config["max_seqs"] and not scheduler.states.holders()
    for rid, prompt, max_tokens, _, _ in reqs:
        request, expected = made[rid], reference(prompt, max_tokens, config["num_ctx"])
        if request.finish_reason is FinishReason.ABORT:
            assert request.output_ids == expected[: len(request.output_ids)]
        else:
            assert request.output_ids == expected, rid
