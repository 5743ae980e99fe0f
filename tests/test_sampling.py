"""Logits processors against hand-computed values, the seeded sampler on every backend, and stop strings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blazr.engine.request import Request, SamplingParams
from blazr.engine.sampling import (
    Sampler,
    StopStrings,
    apply_frequency_presence,
    apply_logit_bias,
    apply_repeat_penalty,
    make_rng,
    process_logits,
    token_logprobs,
)
from blazr.errors import ConfigError

# ---- processors ------------------------------------------------------------------------------------------


def test_repeat_penalty_divides_positive_and_multiplies_negative():
    logits = np.array([2.0, -1.0, 0.5, 3.0], dtype=np.float32)
    apply_repeat_penalty(logits, [0, 1, 0], penalty=2.0, last_n=64)
    np.testing.assert_array_equal(logits, [1.0, -2.0, 0.5, 3.0])  # token 0 seen twice, penalised once


def test_repeat_penalty_only_looks_at_the_last_n_tokens():
    logits = np.array([2.0, 2.0, 2.0, 2.0], dtype=np.float32)
    apply_repeat_penalty(logits, [3, 0, 1], penalty=4.0, last_n=2)
    np.testing.assert_array_equal(logits, [0.5, 0.5, 2.0, 2.0])
    whole = np.array([2.0, 2.0, 2.0, 2.0], dtype=np.float32)
    apply_repeat_penalty(whole, [3, 0, 1], penalty=4.0, last_n=-1)
    np.testing.assert_array_equal(whole, [0.5, 0.5, 2.0, 0.5])
    off = np.array([2.0, 2.0], dtype=np.float32)
    apply_repeat_penalty(off, [0, 1], penalty=4.0, last_n=0)
    np.testing.assert_array_equal(off, [2.0, 2.0])


def test_frequency_and_presence_penalties_follow_openai():
    logits = np.zeros(4, dtype=np.float32)
    apply_frequency_presence(logits, [1, 1, 2], frequency=0.5, presence=0.25)
    np.testing.assert_allclose(logits, [0.0, -(2 * 0.5 + 0.25), -(1 * 0.5 + 0.25), 0.0])


def test_logit_bias_adds_to_listed_tokens():
    logits = np.array([1.0, 1.0, 1.0], dtype=np.float32)
    apply_logit_bias(logits, {2: -5.0, 0: 3.0})
    np.testing.assert_array_equal(logits, [4.0, 1.0, -4.0])


def test_process_logits_applies_bias_then_repeat_then_frequency():
    params = SamplingParams(logit_bias={0: 1.0}, repeat_penalty=2.0, frequency_penalty=1.0)
    request = Request("r", [0, 3], params, rng=make_rng(0), output_ids=[3])
    raw = np.array([1.0, 1.0, 1.0, -1.0], dtype=np.float32)
    out = process_logits(raw, request)
    # token 0: (1 + 1) / 2; token 3: -1 * 2 - 1 (one generated occurrence)
    np.testing.assert_allclose(out, [1.0, 1.0, 1.0, -3.0])
    np.testing.assert_array_equal(raw, [1.0, 1.0, 1.0, -1.0])  # the input is not modified


def test_token_logprobs_is_log_softmax_with_top_n():
    logits = np.array([0.0, math.log(3.0), -50.0], dtype=np.float32)  # probs ~ 1/4, 3/4, 0
    lp = token_logprobs(logits, token_id=0, top_n=2)
    assert lp.token_id == 0
    assert lp.logprob == pytest.approx(math.log(0.25), abs=1e-6)
    assert [t for t, _ in lp.top] == [1, 0]
    assert lp.top[0][1] == pytest.approx(math.log(0.75), abs=1e-6)


# ---- params ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", -0.5),
        ("top_p", 0.0),
        ("top_k", -1),
        ("min_p", 1.5),
        ("max_tokens", 0),
        ("logprobs", 21),
    ],
)
def test_out_of_range_params_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        SamplingParams(**{field: value}).validate()


def test_unknown_param_and_bad_token_ids_are_config_errors():
    with pytest.raises(ConfigError, match="temprature"):
        SamplingParams.from_kwargs(temprature=0.5)
    with pytest.raises(ConfigError, match="logit_bias"):
        SamplingParams(logit_bias={100: 1.0}).validate(vocab_size=50)
    with pytest.raises(ConfigError, match="stop"):
        SamplingParams(stop=[""]).validate()


# ---- the sampler -----------------------------------------------------------------------------------------


def _draw(backend, logits: np.ndarray, n: int, **params) -> list[int]:
    """n tokens from one request over a fixed logits row (1, V)."""
    request = Request("r", [0], SamplingParams(**params).validate(), rng=make_rng(params.get("seed")))
    sampler = Sampler(backend)
    device_logits = backend.upload(logits[None, :].astype(np.float32), dtype="f32")
    return [sampler.sample(device_logits, [request])[0][0] for _ in range(n)]


def test_same_seed_same_tokens_and_different_seeds_differ(backend):
    logits = np.zeros(64, dtype=np.float32)  # uniform: every draw matters
    first = _draw(backend, logits, 24, seed=7, temperature=1.0)
    assert first == _draw(backend, logits, 24, seed=7, temperature=1.0)
    assert first != _draw(backend, logits, 24, seed=8, temperature=1.0)
    assert len(set(first)) > 5


def test_top_k_1_equals_greedy(backend, rng):
    logits = rng.standard_normal(100).astype(np.float32)
    greedy = _draw(backend, logits, 3, temperature=0.0)
    assert greedy == [int(np.argmax(logits))] * 3
    assert _draw(backend, logits, 10, temperature=1.5, top_k=1, seed=3) == greedy[:1] * 10


def test_logit_bias_forces_a_token(backend, rng):
    logits = rng.standard_normal(100).astype(np.float32)
    assert _draw(backend, logits, 10, temperature=1.0, seed=1, logit_bias={42: 100.0}) == [42] * 10
    assert 42 not in _draw(backend, logits, 10, temperature=0.0, logit_bias={42: -100.0, 7: 100.0})


def test_sampler_rows_use_their_own_rng(backend, rng):
    """A request's tokens do not depend on which other requests share the batch."""
    logits = np.zeros((2, 64), dtype=np.float32)
    alone = _draw(backend, logits[0], 8, seed=5, temperature=1.0)
    a = Request("a", [0], SamplingParams(seed=5), rng=make_rng(5))
    b = Request("b", [0], SamplingParams(seed=9, repeat_penalty=1.3), rng=make_rng(9))
    sampler = Sampler(backend)
    device_logits = backend.upload(logits, dtype="f32")
    together = [sampler.sample(device_logits, [a, b])[0][0] for _ in range(8)]
    assert together == alone


def test_sampler_returns_logprobs_when_asked(backend):
    logits = np.array([0.0, math.log(3.0), -50.0, -50.0], dtype=np.float32)
    request = Request("r", [0], SamplingParams(temperature=0.0, logprobs=2), rng=make_rng(0))
    ids, logprobs = Sampler(backend).sample(backend.upload(logits[None, :], dtype="f32"), [request])
    assert ids == [1]
    assert logprobs[0].logprob == pytest.approx(math.log(0.75), abs=1e-5)
    assert [t for t, _ in logprobs[0].top] == [1, 0]


# ---- stop strings ----------------------------------------------------------------------------------------


def test_stop_string_split_across_tokens_is_never_emitted():
    stops = StopStrings(["END"])
    assert stops.push("abc E") == ("abc ", None)  # "E" could start "END": held back
    assert stops.push("N") == ("", None)
    assert stops.push("D more") == ("", "END")


def test_held_text_is_released_when_it_stops_matching():
    stops = StopStrings(["END", "xyz"])
    assert stops.push("an E") == ("an ", None)
    assert stops.push("Nd") == ("ENd", None)
    assert stops.push("x") == ("", None)
    assert stops.flush() == "x"


def test_earliest_stop_string_wins():
    stops = StopStrings(["world", "lo w"])
    assert stops.push("hello world") == ("hel", "lo w")
