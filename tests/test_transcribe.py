"""Whisper transcription of whole recordings against openai-whisper's own `transcribe()`
(tests/golden/whisper/transcribe_*.json, made by tests/parity/make_whisper_transcribe_reference.py from the
tiny random checkpoints of tests/tiny_whisper.py): 75 s of audio, so three windows and the seek logic, with
timestamp tokens, conditioning on previous text, greedy and beam search (5). The segments (where each
window starts, each segment's times and token ids) must be the same."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blazr.errors import InputError
from blazr.tasks.transcribe import Transcriber
from tests import tiny_whisper

GOLDEN = Path(__file__).parent / "golden" / "whisper"


@pytest.fixture(scope="module", params=tiny_whisper.CASES)
def tiny(request, tmp_path_factory):
    directory = tiny_whisper.write(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, Transcriber.load(directory)


@pytest.mark.parity
@pytest.mark.parametrize("search", ["greedy", "beam5"])
def test_segments_equal_openai_whisper(tiny, search):
    case, transcriber = tiny
    ref = json.loads((GOLDEN / f"transcribe_{case}.json").read_text())
    got = transcriber.transcribe(
        tiny_whisper.random_audio(ref["seconds"]),
        language="en" if case == "multi" else None,
        temperature=0.0,
        beam_size=5 if search == "beam5" else None,
        suppress_blank=False,
    )
    want = ref[search]
    assert [(s.seek, s.tokens) for s in got.segments] == [(s["seek"], s["tokens"]) for s in want]
    for g, w in zip(got.segments, want, strict=True):
        assert (g.start, g.end) == pytest.approx((w["start"], w["end"]), abs=1e-6)
        assert g.avg_logprob == pytest.approx(w["avg_logprob"], abs=2e-3)
        assert g.no_speech_prob == pytest.approx(w["no_speech_prob"], abs=2e-3)


@pytest.fixture(scope="module", params=tiny_whisper.CASES)
def tiny_short(request, tmp_path_factory):
    """The tiny model with a 48-position decoder context: each window decodes ~5x fewer tokens than at
    Whisper's 448 (random weights never end a window), for the tests that compare blazr with itself."""
    directory = tmp_path_factory.mktemp(f"{request.param}-short")
    return request.param, Transcriber.load(tiny_whisper.write(request.param, directory, text_positions=48))


def test_recordings_batched_equal_each_alone(tiny_short):
    case, transcriber = tiny_short
    language = "en" if case == "multi" else None
    audios = [tiny_whisper.random_audio(35.0, seed=1), tiny_whisper.random_audio(12.0, seed=2)]
    # the random models' text is unlikely: every window falls back once, to sampling (best of 2)
    options = dict(language=language, temperature=(0.0, 1.0), beam_size=2, best_of=2, suppress_blank=False)
    alone = [transcriber.transcribe(a, **options) for a in audios]
    runs = [transcriber.start(a, **options) for a in audios]
    transcriber.run_batch(runs)
    for run, want in zip(runs, alone, strict=True):
        assert [(s.seek, s.tokens) for s in run.transcript().segments] == [
            (s.seek, s.tokens) for s in want.segments
        ]


def test_language_detection_equals_openai_whisper(tiny):
    case, transcriber = tiny
    if case != "multi":
        assert transcriber.detect_language(np.zeros((80, 3000), np.float32)) == ("en", {"en": 1.0})
        return
    from blazr.audio import log_mel_spectrogram, pad_or_trim

    ref = json.loads((GOLDEN / f"transcribe_{case}.json").read_text())["language_probs"]
    mel = log_mel_spectrogram(pad_or_trim(tiny_whisper.random_audio(30.0)))
    code, probs = transcriber.detect_language(mel)
    assert code == max(ref, key=ref.get)
    assert [probs[k] for k in ref] == pytest.approx(list(ref.values()), abs=1e-4)


def test_bad_language_and_task_name_the_field(tiny):
    case, transcriber = tiny
    audio = tiny_whisper.random_audio(1.0)
    with pytest.raises(InputError) as e:
        transcriber.transcribe(audio, language="klingon")
    assert e.value.param == "language"
    with pytest.raises(InputError) as e:
        transcriber.transcribe(audio, task="summarize")
    assert e.value.param == "task"
    if case == "en":
        with pytest.raises(InputError) as e:
            transcriber.transcribe(audio, language="de")
        with pytest.raises(InputError) as e:
            transcriber.transcribe(audio, task="translate")
        assert e.value.param == "task"


def test_blazr_load_gives_a_transcriber_and_other_commands_say_what_it_is(tmp_path):
    import blazr
    from blazr.api import LLM
    from blazr.errors import UnsupportedError
    from blazr.tasks.embed import Embedder

    directory = tiny_whisper.write("en", tmp_path / "w")
    assert isinstance(blazr.load(str(directory)), Transcriber)
    for loader in (LLM.load, Embedder.load):
        with pytest.raises(UnsupportedError, match="speech recognition model.*blazr transcribe"):
            loader(str(directory))
