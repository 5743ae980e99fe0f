"""PrefixRouter: longest cached prefix first, least loaded otherwise, bounded memory."""

from __future__ import annotations

from blazr.distributed.prefix_router import PrefixRouter


def prompt(seed: int, length: int) -> list[int]:
    return [(seed * 7919 + i * 31) % 1000 for i in range(length)]


def test_block_keys_cover_full_blocks_and_chain_the_prefix():
    router = PrefixRouter(2, block_size=4)
    assert router.block_keys([1, 2, 3]) == []  # shorter than a block: nothing to reuse
    a = router.block_keys([1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = router.block_keys([9, 9, 9, 9, 5, 6, 7, 8])
    assert len(a) == 2 and len(b) == 2
    assert a[1] != b[1]  # the same second block after another first block is another prefix


def test_a_repeated_prompt_goes_where_its_prefix_is():
    router = PrefixRouter(3, block_size=4)
    live = [True, True, True]
    first = router.pick(prompt(1, 20), [0, 0, 0], live)
    router.record(first, prompt(1, 20))
    # another replica is less loaded, but within the imbalance allowed: the cached one wins
    load = [0, 0, 0]
    load[first] = 2
    assert router.pick(prompt(1, 20), load, live) == first
    # a prompt sharing only its first two blocks still prefers it over idle replicas
    shared = prompt(1, 8) + prompt(5, 12)
    assert router.pick(shared, load, live) == first


def test_longest_match_wins_between_replicas():
    router = PrefixRouter(2, block_size=4)
    base = prompt(3, 8)
    router.record(0, base)
    router.record(1, base + prompt(4, 8))
    assert router.pick(base + prompt(4, 8), [0, 0], [True, True]) == 1
    assert router.pick(base + prompt(9, 8), [0, 0], [True, True]) == 0  # ties go to the first with the most


def test_an_overloaded_cache_holder_gives_way_to_the_least_loaded():
    router = PrefixRouter(2, block_size=4, max_imbalance=4)
    router.record(0, prompt(1, 16))
    assert router.pick(prompt(1, 16), [4, 0], [True, True]) == 0
    assert router.pick(prompt(1, 16), [5, 0], [True, True]) == 1


def test_unmatched_prompts_spread_round_robin_over_equal_loads():
    router = PrefixRouter(3, block_size=4)
    picks = [router.pick(prompt(i, 2), [0, 0, 0], [True, True, True]) for i in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]
    assert router.pick(prompt(0, 2), [1, 0, 1], [True, True, True]) == 1  # least loaded first


def test_dead_replicas_get_nothing_and_forget_their_cache():
    router = PrefixRouter(2, block_size=4)
    router.record(0, prompt(1, 16))
    assert router.pick(prompt(1, 16), [0, 0], [False, True]) == 1
    assert router.pick(prompt(1, 16), [0, 0], [False, False]) is None
    router.forget(0)
    assert router.held[0] == {}


def test_memory_is_bounded_least_recent_first():
    router = PrefixRouter(1, block_size=4, max_blocks=6)
    router.record(0, prompt(1, 16))  # 4 blocks
    router.record(0, prompt(2, 16))  # 4 more: the oldest two of the first prompt drop
    assert len(router.held[0]) == 6
    keys = router.block_keys(prompt(1, 16))
    assert keys[0] not in router.held[0] and keys[3] in router.held[0]
