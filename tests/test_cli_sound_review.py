"""`blazr sound-review DIR` in-process: a good sound passes, a clipped or silent one fails (exit 1), --json's
shape, bad input exits 2 naming the file, entry or flag, a model that is not CLAP exits 3, and the tiny CLAP
(tests/data/tiny_clap) ranks each clip against every description as transformers' logits order them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from blazr.cli import app

soundfile = pytest.importorskip("soundfile")
runner = CliRunner()
RATE = 48_000
TINY_CLAP = Path(__file__).parent / "data" / "tiny_clap"
GOLDEN = Path(__file__).parent / "golden" / "clap.npz"


def tone(seconds: float, dbfs: float = -12.0, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    fade = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.05)  # 50 ms fades: no edge overshoot
    return 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * t) * fade


def review(*args: str):
    return runner.invoke(app, ["sound-review", *map(str, args)])


@pytest.fixture
def sounds(tmp_path) -> Path:
    soundfile.write(tmp_path / "good.wav", tone(1.5), RATE)
    (tmp_path / "good.txt").write_text("a steady tone")
    soundfile.write(tmp_path / "clipped.wav", np.clip(4 * tone(1.5, dbfs=0.0, freq=220), -1, 1), RATE)
    soundfile.write(tmp_path / "silent.flac", np.zeros(RATE), RATE)
    (tmp_path / "clipped.txt").write_text("a distorted hum")
    (tmp_path / "silent.txt").write_text("nothing at all")
    return tmp_path


def test_good_passes_clipped_and_silent_fail(sounds):
    result = review(sounds, "--no-model")
    assert result.exit_code == 1, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(lines) == {"clipped.wav", "good.wav", "silent.flac"}
    assert " ok " in lines["good.wav"] and lines["good.wav"].rstrip().endswith("-")
    assert "FAILED" in lines["clipped.wav"] and "clipped (" in lines["clipped.wav"]
    assert "FAILED" in lines["silent.flac"] and "silent (nothing above -60 dBFS)" in lines["silent.flac"]
    assert "3 sounds: 2 FAILED (clipped.wav, silent.flac)" in result.stderr


def test_only_good_sounds_exit_0(sounds):
    (sounds / "clipped.wav").unlink()
    (sounds / "silent.flac").unlink()
    result = review(sounds, "--no-model")
    assert result.exit_code == 0, result.stderr
    assert "1 sounds: all passed" in result.stderr


def test_thresholds_are_flags(sounds):
    (sounds / "clipped.wav").unlink()
    (sounds / "silent.flac").unlink()
    result = review(sounds, "--no-model", "--max-loudness", "-20")
    assert result.exit_code == 1 and "LUFS above -20" in result.stdout


def test_json_report(sounds):
    result = review(sounds, "--no-model", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert set(report) == {"directory", "model", "limits", "ok", "sounds"}
    assert report["ok"] is False and report["model"] is None and report["limits"]["clip_run"] == 3
    by_name = {s["file"]: s for s in report["sounds"]}
    good = by_name["good.wav"]
    assert set(good) == {"file", "description", "expected", "measures", "ranking", "problems", "ok"}
    assert good["ok"] and good["description"] == "a steady tone" and good["ranking"] is None
    assert good["measures"]["duration"] == pytest.approx(1.5) and good["measures"]["sample_rate"] == RATE
    silent = by_name["silent.flac"]["measures"]
    assert silent["loudness"] is None and silent["true_peak"] is None and silent["silent_fraction"] == 1.0


def test_without_a_model_the_checks_run_then_exit_2(sounds):
    result = review(sounds)
    assert result.exit_code == 2
    assert "good.wav" in result.stdout
    assert "no CLAP model in blazr's catalog" in result.stderr and "--model PATH" in result.stderr
    assert "--no-model" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-silence", "1.5"], "--max-silence 1.5: it must be in [0, 1]"),
        (["--clip-run", "0"], "--clip-run 0"),
        (["--min-loudness", "-5", "--max-loudness", "-10"], "--min-loudness -5 is above --max-loudness -10"),
        (["--max-rank", "0"], "--max-rank 0"),
        (["--model", "x", "--no-model"], "--model and --no-model"),
        (["--model", "no/such/model"], "--model:"),
    ],
)
def test_bad_flags_exit_2(sounds, args, message):
    flags = args if "--model" in args else ["--no-model", *args]
    result = review(sounds, *flags)
    assert result.exit_code == 2 and message in result.stderr


def test_bad_input_exits_2_naming_it(tmp_path, sounds):
    missing = tmp_path / "nowhere"
    result = review(missing, "--no-model")
    assert result.exit_code == 2 and f"{missing}: no such directory" in result.stderr
    (sounds / "manifest.yaml").write_text("sounds:\n  good.wav:\n    loudnes: -20\n")
    result = review(sounds, "--no-model")
    assert result.exit_code == 2
    assert "manifest.yaml: sound 'good.wav': unknown key 'loudnes'" in result.stderr
    (sounds / "manifest.yaml").unlink()
    (sounds / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    result = review(sounds, "--no-model")
    assert result.exit_code == 2 and "broken.wav" in result.stderr


def test_manifest_expectations_are_checked(sounds):
    manifest = sounds / "sounds.json"
    manifest.write_text(json.dumps({"sounds": {"good.wav": {"description": "tone", "duration": 3}}}))
    result = review(sounds, "--no-model", "--manifest", manifest)
    assert result.exit_code == 1
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == ["good.wav"]
    assert "lasts 1.50 s, expected 3 s" in result.stdout


def test_a_model_that_is_not_clap_exits_3(sounds, tmp_path):
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "bert"}')
    result = review(sounds, "--model", other)
    assert result.exit_code == 3 and "not a CLAP model" in result.stderr
    assert "run it another way" in result.stderr


@pytest.fixture
def clips(tmp_path) -> tuple[Path, np.ndarray]:
    """The golden clips as 16-bit WAVs, each with its text as the .txt sidecar; and transformers' logits."""
    ref = np.load(GOLDEN)
    folder = tmp_path / "clips"
    folder.mkdir()
    for i, text in enumerate(ref["texts"]):
        soundfile.write(folder / f"clip{i}.wav", ref[f"clip{i}"], RATE, subtype="PCM_16")  # int16 samples
        (folder / f"clip{i}.txt").write_text(str(text))
    return folder, ref["logits_per_audio"]


def test_ranking_follows_transformers_logits(clips):
    folder, logits = clips
    result = review(folder, "--model", TINY_CLAP, "--json")
    report = json.loads(result.stdout)
    ranks = [s["ranking"]["rank"] for s in report["sounds"]]
    want = [1 + int((row > row[i]).sum()) for i, row in enumerate(logits)]
    assert ranks == want and ranks != [1] * len(ranks)  # the random tiny model misplaces some
    best = [s["ranking"]["best_match"] for s in report["sounds"]]
    assert best == [f"clip{int(np.argmax(row))}.wav" for row in logits]
    assert result.exit_code == 1
    assert all(
        ("its description ranks" in " ".join(s["problems"])) == (s["ranking"]["rank"] > 1)
        for s in report["sounds"]
    )
    relaxed = review(folder, "--model", TINY_CLAP, "--max-rank", str(len(ranks)))
    assert relaxed.exit_code == 0, relaxed.stdout + relaxed.stderr
    assert relaxed.stdout.splitlines()[0].split()[-2] == "rank"


def test_ranking_needs_every_description(clips):
    folder, _ = clips
    (folder / "clip2.txt").unlink()
    result = review(folder, "--model", TINY_CLAP)
    assert result.exit_code == 2 and "clip2.wav: no description to rank it against" in result.stderr
