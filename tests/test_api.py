"""The public API on the real SmolLM2-135M-Instruct (Q4_1 GGUF): greedy text, chat and streaming."""

from __future__ import annotations

import pytest

import blazr
from blazr.errors import ConfigError

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def llm(smollm2_gguf):
    return blazr.load(str(smollm2_gguf), device="cpu")


def test_greedy_continues_with_paris(llm):
    text = llm.generate("The capital of France is", max_tokens=3, temperature=0)
    assert text.startswith(" Paris.")
    stats = llm.last_stats
    assert stats.prompt_tokens == 5 and stats.completion_tokens == 3 and stats.finish_reason == "length"
    assert stats.prefill_seconds > 0 and stats.decode_seconds > 0


def test_chat_answers_two_plus_two(llm):
    answer = llm.chat([{"role": "user", "content": "What is 2+2?"}], temperature=0, max_tokens=16)
    assert "4" in answer
    assert llm.last_stats.finish_reason in ("stop", "length")


def test_stream_pieces_join_to_generate_text(llm):
    pieces = list(llm.stream("The capital of France is", max_tokens=6, temperature=0))
    assert len(pieces) > 1
    assert "".join(pieces) == llm.generate("The capital of France is", max_tokens=6, temperature=0)


def test_dropping_a_stream_early_aborts_it(llm):
    stream = llm.stream("Once upon a time", max_tokens=50, temperature=0)
    next(stream)
    stream.close()
    assert llm.generate([504, 3575, 282, 4649, 314], max_tokens=2, temperature=0) == " Paris."
    assert llm.engine.pool.num_free == llm.engine.pool.num_blocks


def test_tokenize_round_trip_and_bad_params(llm):
    ids = llm.tokenize("The capital of France is")
    assert ids == [504, 3575, 282, 4649, 314]
    assert llm.detokenize(ids) == "The capital of France is"
    with pytest.raises(ConfigError, match="temperature"):
        llm.generate("hi", temperature=-1)
    with pytest.raises(ConfigError, match="max_tokes"):
        llm.generate("hi", max_tokes=3)
