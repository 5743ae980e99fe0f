"""The real whisper tiny.en (catalog `whisper-tiny.en`, the CTranslate2 directory faster-whisper ships) on the
committed espeak-ng speech set, against faster-whisper on the same weights and audio
(tests/golden/whisper/faster_whisper_tiny_en.json, made by tests/parity/make_whisper_faster_reference.py).

* The 20 clips with beam 5: blazr's word errors (tests/wer.py) no more than faster-whisper's plus one word.
  The slack is for a near-tie: blazr's numpy float32 and CTranslate2's float32 round differently, and where
  two beam hypotheses score within that rounding, one word may flip either way; a decoding bug costs many
  words, not one. (When this was written both made the same 13 errors in 172 words, clip by clip.)
* Long-form, the set with 1 s gaps (77.8 s) and the issue's 3-minute file (the set twice with 2 s gaps,
  195.6 s): every sentence transcribed, in order, with monotonic segment times placed on their sentences.

Segment start times are held to [sentence start - 3 s, sentence start + 1 s], not to 1 s either way: tiny.en
starts a segment in the silence before its sentence or at the previous segment's end, and faster-whisper's own
segments start up to 1.35 s early on the 77.8 s recording and 1.82 s early on the 3-minute one (blazr's: 1.35
and 2.64 s). A seek or offset bug moves segments by whole seconds to a whole 30 s window, which these bounds
and the overlap check catch; blazr's mean start error must also stay within 0.25 s of faster-whisper's.

Runtime on a quiet 2-core AMD EPYC (Zen 5): 34 s in all, the 20 clips 15 s (each clip is a padded 30 s
window, so the encoder dominates), the 77.8 s recording 5.5 s and the 3-minute one 12.7 s; on the same machine
shared with other test runs the same work took 5-10x longer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import speech_set
from tests.conftest import fetch_registry_model
from tests.parity.make_whisper_faster_reference import LONG_FORMS, recording
from tests.wer import align, normalize, word_errors

pytestmark = [pytest.mark.registry, pytest.mark.slow]

GOLDEN = Path(__file__).parent / "golden" / "whisper" / "faster_whisper_tiny_en.json"
WORD_SLACK = 1  # words blazr may miss beyond faster-whisper's errors over the 20 clips (see the docstring)
EARLY, LATE = 3.0, 1.0  # seconds a one-sentence segment may start before / after its sentence
MEAN_START_SLACK = 0.25  # seconds blazr's mean start error may exceed faster-whisper's
MIN_FOUND = 0.6  # share of each sentence's words a long-form transcript must hold, in order


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def transcriber():
    from blazr.tasks.transcribe import Transcriber

    return Transcriber.load(fetch_registry_model("whisper-tiny.en"))


def placement(segments: list[tuple[float, float, str]], spans: list[tuple[str, float, float]]) -> dict:
    """Which sentence each segment holds: the longest in-order pairing of the sentences' words with the
    segments' (normalised) words. Returns each sentence's share of words found and, for each segment that
    holds exactly one sentence and that sentence alone, (segment index, sentence index)."""
    ref, ref_owner, hyp, hyp_owner = [], [], [], []
    for k, (text, _, _) in enumerate(spans):
        words = normalize(text)
        ref += words
        ref_owner += [k] * len(words)
    for s, (_, _, text) in enumerate(segments):
        words = normalize(text)
        hyp += words
        hyp_owner += [s] * len(words)
    matched = align(ref, hyp)
    found = [0] * len(spans)
    segments_of: list[set[int]] = [set() for _ in spans]
    sentences_of: list[set[int]] = [set() for _ in segments]
    for r, h in enumerate(matched):
        if h is not None:
            found[ref_owner[r]] += 1
            segments_of[ref_owner[r]].add(hyp_owner[h])
            sentences_of[hyp_owner[h]].add(ref_owner[r])
    share = [f / len(normalize(text)) for f, (text, _, _) in zip(found, spans, strict=True)]
    pairs = [
        (s, k)
        for k, segs in enumerate(segments_of)
        if len(segs) == 1 and sentences_of[(s := next(iter(segs)))] == {k}
    ]
    return {"share": share, "pairs": pairs}


def start_errors(segments, spans, pairs) -> list[float]:
    """Segment start - sentence start (s) of each one-sentence segment (a span starts 0.1 s before its
    speech)."""
    return [segments[s][0] - spans[k][1] for s, k in pairs]


def test_clips_word_error_rate_no_worse_than_faster_whisper(transcriber, golden):
    sentences = speech_set.sentences()
    assert golden["sentences"] == list(sentences), "the speech set changed: remake the golden file"
    texts = [transcriber.transcribe(speech_set.load(i), beam_size=5).text for i in range(len(sentences))]
    errors = [word_errors(ref, hyp)[0] for ref, hyp in zip(sentences, texts, strict=True)]
    want = golden["score"]["errors"]
    differing = {
        i: (texts[i], golden["clips"][i]["text"], errors[i], want[i])
        for i in range(len(sentences))
        if errors[i] != want[i]
    }
    assert sum(errors) <= sum(want) + WORD_SLACK, (sum(errors), sum(want), differing)


@pytest.mark.parametrize("name", ["long_form_1s", "long_form_3min"])
def test_long_form_complete_in_order_and_placed(transcriber, golden, name):
    audio, spans = recording(*LONG_FORMS[name])
    duration = audio.size / speech_set.RATE
    assert name != "long_form_3min" or duration >= 180.0
    transcript = transcriber.transcribe(audio, beam_size=5)
    assert transcript.duration == pytest.approx(duration, abs=0.02)
    segments = [(s.start, s.end, s.text) for s in transcript.segments]
    assert segments, "no segments"

    # monotonic: each segment ends no earlier than it starts and no later than the next one starts; the last
    # may run past the end, as the window's final timestamp token allows (faster-whisper does the same)
    for (start, end, text), (next_start, _, _) in zip(
        segments, segments[1:] + [(duration + 1.0, 0, "")], strict=True
    ):
        assert 0.0 <= start <= end <= next_start, (start, end, next_start, text)

    # complete and in order: most words of every sentence, found in the sentences' order
    placed = placement(segments, spans)
    missing = [(spans[k][0], share) for k, share in enumerate(placed["share"]) if share < MIN_FOUND]
    assert not missing, missing

    # placed: segments that hold one sentence start near it and overlap it
    pairs = placed["pairs"]
    assert len(pairs) >= 0.8 * len(spans), f"only {len(pairs)} of {len(spans)} sentences have a segment each"
    errors = start_errors(segments, spans, pairs)
    wrong = [
        (spans[k][0], segments[s][:2], spans[k][1:])
        for (s, k), e in zip(pairs, errors, strict=True)
        if not -EARLY <= e <= LATE
    ]
    assert not wrong, wrong
    apart = [
        (spans[k][0], segments[s][:2], spans[k][1:])
        for s, k in pairs
        if segments[s][1] <= spans[k][1] or segments[s][0] >= spans[k][2]
    ]
    assert not apart, apart

    # no worse than faster-whisper on the same recording, in words and in start times
    theirs = [(s["start"], s["end"], s["text"]) for s in golden[name]["segments"]]
    reference = " ".join(text for text, _, _ in spans)
    ours_errors, words = word_errors(reference, " ".join(t for _, _, t in segments))
    their_errors, _ = word_errors(reference, " ".join(t for _, _, t in theirs))
    passes = LONG_FORMS[name][0]  # one word of slack per pass over the 20 sentences
    assert ours_errors <= their_errors + WORD_SLACK * passes, (ours_errors, their_errors, words)
    their_pairs = placement(theirs, spans)["pairs"]
    ours_mean = sum(map(abs, errors)) / len(errors)
    their_errors_s = start_errors(theirs, spans, their_pairs)
    their_mean = sum(map(abs, their_errors_s)) / len(their_errors_s)
    assert ours_mean <= their_mean + MEAN_START_SLACK, (ours_mean, their_mean)
