"""`blazr speak` with the real voice (piper-joe) and listener (whisper-tiny.en), in-process: a clean script
exits 0 with a WAV whose sidecar timings match it; an unpronounceable line is reported with the words that
differ and exits 1; bad input exits 2 naming the file or flag; a model that is not a voice exits 3.

The two models load once per session (load_voice / load_listener are memoized here), so each case costs
only its synthesis and transcription."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blazr.cli import app
from blazr.commands import speak as speak_command
from tests.conftest import fetch_registry_model

soundfile = pytest.importorskip("soundfile")
pytestmark = [pytest.mark.registry]
runner = CliRunner()

PHRASES = """Good morning and welcome.
Today we will bake a loaf of bread.
First, warm the oven to two hundred degrees.
Mix the flour with a little salt.
Add the water slowly and stir.
Work the dough for ten minutes.
Let it rest in a warm place.
Then put the dough in a tin.
Leave it in the oven for forty minutes.
Thank you for watching.""".splitlines()
GIBBERISH = "Xkcd zqwv pfft."


@pytest.fixture(scope="module")
def models() -> dict[str, str]:
    return {
        "voice": str(fetch_registry_model("piper-joe")),
        "asr": str(fetch_registry_model("whisper-tiny.en")),
    }


_load_voice = functools.cache(speak_command.load_voice)
_load_listener = functools.cache(speak_command.load_listener)


@pytest.fixture(autouse=True)
def memoized_models(monkeypatch):
    monkeypatch.setattr(speak_command, "load_voice", _load_voice)
    monkeypatch.setattr(speak_command, "load_listener", _load_listener)


def speak(models, *args: str):
    return runner.invoke(app, ["speak", *args, "--model", models["voice"], "--asr-model", models["asr"]])


@pytest.mark.slow
def test_ten_phrases_heard_as_written(models, tmp_path):
    script = tmp_path / "bread.txt"
    script.write_text("# Baking bread\n\n" + "\n".join(PHRASES) + "\n")
    result = speak(models, str(script), "--reroll", "2", "--pause", "0.4")
    assert result.exit_code == 0, result.stderr
    wav, sidecar = tmp_path / "bread.wav", tmp_path / "bread.json"
    assert result.stdout.strip() == str(wav)
    assert "10 parts" in result.stderr and "10 ok" in result.stderr

    audio, rate = soundfile.read(wav, dtype="float32")
    info = soundfile.info(wav)
    assert rate == 22050 and audio.ndim == 1 and info.subtype == "PCM_16"
    duration = len(audio) / rate
    timing = json.loads(sidecar.read_text())
    assert timing["audio"] == "bread.wav" and timing["sample_rate"] == 22050 and timing["ok"] is True
    assert timing["duration"] == pytest.approx(duration, abs=1e-3)
    parts = timing["parts"]
    assert [p["text"] for p in parts] == PHRASES and [p["index"] for p in parts] == list(range(1, 11))
    assert [p["line"] for p in parts] == list(range(3, 13))
    assert all(p["ok"] and p["status"] == "ok" and p["differences"] == [] and p["heard"] for p in parts)
    for p in parts:
        assert 0 <= p["start"] < p["end"] <= timing["duration"]
        span = audio[round(p["start"] * rate) : round(p["end"] * rate)]
        assert np.abs(span).max() > 0.5  # speech (peak-normalised) inside the span
    for a, b in zip(parts, parts[1:], strict=False):
        assert b["start"] - a["end"] == pytest.approx(0.4, abs=2e-3)  # the pause, and no overlap
        margin = 12  # samples: the sidecar's times are rounded to the millisecond (22 samples)
        gap = audio[round(a["end"] * rate) + margin : round(b["start"] * rate) - margin]
        assert len(gap) > 8000 and not gap.any()  # the pause is silence
    assert parts[-1]["end"] == pytest.approx(timing["duration"], abs=1e-3)


@pytest.mark.slow
def test_unpronounceable_phrase_is_reported(models, tmp_path):
    script = tmp_path / "mixed.txt"
    script.write_text(f"Good morning and welcome.\n{GIBBERISH}\n")
    out = tmp_path / "vo" / "mixed.wav"
    out.parent.mkdir()
    result = speak(models, str(script), "-o", str(out), "--reroll", "1", "--seed", "3")
    assert result.exit_code == 1, result.stderr
    assert "MISMATCH" in result.stderr and "differs: 'xkcd" in result.stderr
    assert "1 mismatch (part 2)" in result.stderr
    timing = json.loads(out.with_suffix(".json").read_text())  # written anyway, to inspect
    first, second = timing["parts"]
    assert first["ok"] is True and first["seed"] == 3 and first["takes"] == 1
    assert second["ok"] is False and second["status"] == "mismatch" and second["takes"] == 2
    assert second["seed"] in (3, 4)
    assert second["differences"] and second["differences"][0]["expected"].startswith("xkcd")
    assert timing["ok"] is False and out.is_file()


def test_manifest_with_per_part_settings(models, tmp_path):
    script = tmp_path / "talk.yaml"
    script.write_text(
        "pause: 0.5\nseed: 7\nparts:\n"
        "  - Good morning and welcome.\n"
        "  - text: Thank you for watching.\n    speed: 2.0\n    seed: 11\n    pause_after: 1.0\n"
        "  - text: Good morning and welcome.\n    speed: 0.5\n"
    )
    result = speak(models, str(script), "--no-check")
    assert result.exit_code == 0, result.stderr
    timing = json.loads((tmp_path / "talk.json").read_text())
    a, b, c = timing["parts"]
    assert (a["seed"], b["seed"], c["seed"]) == (7, 11, 7)
    assert (a["speed"], b["speed"], c["speed"]) == (1.0, 2.0, 0.5)
    assert b["start"] - a["end"] == pytest.approx(0.5, abs=2e-3)
    assert c["start"] - b["end"] == pytest.approx(1.0, abs=2e-3)
    assert (c["end"] - c["start"]) > 1.6 * (a["end"] - a["start"])  # half speed: about twice as long
    assert timing["checked"] is False and timing["ok"] is None and a["heard"] is None
    assert timing["asr_model"] is None and "3 unchecked" in result.stderr


def test_bad_manifest_exits_2_naming_the_file(models, tmp_path):
    script = tmp_path / "talk.yaml"
    script.write_text("parts:\n  - text: Hello.\n    speeed: 2\n")
    result = speak(models, str(script))
    assert result.exit_code == 2
    assert f"error: {script}: part 1: unknown key 'speeed'" in result.stderr


def test_missing_script_exits_2(models, tmp_path):
    result = speak(models, str(tmp_path / "nope.txt"))
    assert result.exit_code == 2 and "nope.txt: no such script file" in result.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--speed", "9"], "--speed 9"),
        (["--reroll", "-1"], "--reroll -1"),
        (["--pause", "-0.1"], "--pause -0.1"),
        (["--max-wer", "2"], "--max-wer 2"),
        (["--seed", "-5"], "--seed -5"),
        (["--voice", "bob"], "--voice: unknown voice 'bob'"),
        (["-o", "out.mp3"], "--output out.mp3"),
    ],
)
def test_flag_out_of_range_exits_2_naming_it(models, tmp_path, flags, named):
    script = tmp_path / "s.txt"
    script.write_text("Hello.\n")
    result = speak(models, str(script), *flags)
    assert result.exit_code == 2, result.stderr
    assert named in result.stderr


def test_unspeakable_line_exits_2_naming_it(models, tmp_path):
    script = tmp_path / "s.txt"
    script.write_text("Hello.\n...\n")
    result = speak(models, str(script))
    assert result.exit_code == 2 and f"{script}: line 2: nothing to speak" in result.stderr


def test_model_that_is_not_a_voice_exits_3(models, tmp_path):
    script = tmp_path / "s.txt"
    script.write_text("Hello.\n")
    for model in (str(script), models["asr"]):
        result = runner.invoke(app, ["speak", str(script), "--model", model, "--no-check"])
        assert result.exit_code == 3, result.stderr
        assert f"--model {model}: not a voice blazr runs" in result.stderr
    assert not (tmp_path / "s.wav").exists()
