"""Word timestamps of the real whisper tiny.en against openai-whisper's own (tests/golden/whisper/
words_tiny_en.json, made by tests/parity/make_whisper_words_reference.py from the same weights and audio):
the same segments and words, each word's times within 0.02 s (one 20 ms alignment step; the log-mel
differs from openai-whisper's by up to 7e-5) and its probability within 0.02."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import speech_set

GOLDEN = Path(__file__).parent / "golden" / "whisper" / "words_tiny_en.json"

pytestmark = [pytest.mark.registry, pytest.mark.slow]


@pytest.fixture(scope="module")
def transcriber():
    from blazr.tasks.transcribe import Transcriber
    from tests.conftest import fetch_registry_model

    return Transcriber.load(fetch_registry_model("whisper-tiny.en"))


def test_word_timestamps_equal_openai_whisper(transcriber):
    ref = json.loads(GOLDEN.read_text())
    silence = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([p for i in range(ref["clips"]) for p in (speech_set.load(i), silence)])
    got = transcriber.transcribe(audio, temperature=0.0, beam_size=None, word_timestamps=True)
    assert [s.text for s in got.segments] == [s["text"] for s in ref["segments"]]
    for segment, want in zip(got.segments, ref["segments"], strict=True):
        assert (segment.start, segment.end) == pytest.approx((want["start"], want["end"]), abs=0.021)
        assert [w.word for w in segment.words] == [w[0] for w in want["words"]]
        for word, (_, start, end, probability) in zip(segment.words, want["words"], strict=True):
            assert (word.start, word.end) == pytest.approx((start, end), abs=0.021), word
            assert word.probability == pytest.approx(probability, abs=0.02), word


def test_int8_weights_give_the_same_text():
    """dtype "q8" (Q8_0 weights, int8 activations: faster-whisper's int8) keeps the transcript."""
    from blazr.tasks.transcribe import Transcriber
    from tests.conftest import fetch_registry_model

    ref = json.loads(GOLDEN.read_text())
    silence = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([p for i in range(ref["clips"]) for p in (speech_set.load(i), silence)])
    q8 = Transcriber.load(fetch_registry_model("whisper-tiny.en"), dtype="q8")
    got = q8.transcribe(audio, temperature=0.0, beam_size=None)
    assert [s.text for s in got.segments] == [s["text"] for s in ref["segments"]]
