"""The model-free checks of `blazr sound-review` (blazr/tasks/sound_checks.py) and its sound lists
(blazr/tasks/sound_manifest.py), on synthesized signals whose right answers are known.

Loudness: BS.1770's calibration is that a 997 Hz sine at -20 dBFS in one channel reads -23.0 LUFS (the K-filter
gains +0.69 dB there and the formula subtracts 0.691), and the same sine in two channels +3 LU more. True peak:
a sine at a quarter of the rate, phase 45 degrees, has every sample at +-0.707 (-3.01 dBFS) while the wave
between them peaks at 1.0 (0 dBTP)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blazr.errors import ConfigError
from blazr.tasks.sound_checks import Limits, clip_runs, measure, problems, silence
from blazr.tasks.sound_manifest import find_sounds

RATE = 48_000


def tone(seconds: float, freq: float = 997.0, dbfs: float = -20.0, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * t)


def faded(x: np.ndarray, seconds: float = 0.1, rate: int = RATE) -> np.ndarray:
    """x with Hann fades at both ends, so no edge adds overshoot to the true peak."""
    r = int(seconds * rate)
    window = np.ones(len(x))
    window[:r], window[-r:] = np.hanning(2 * r)[:r], np.hanning(2 * r)[r:]
    return x * window


def test_loudness_of_the_calibration_sine():
    assert measure(tone(5.0), RATE).loudness == pytest.approx(-23.0, abs=0.1)
    stereo = np.stack([tone(5.0), tone(5.0)], axis=1)
    assert measure(stereo, RATE).loudness == pytest.approx(-20.0, abs=0.1)
    assert measure(tone(5.0, dbfs=-30.0), RATE).loudness == pytest.approx(-33.0, abs=0.1)


def test_loudness_unmeasurable_or_silent():
    assert measure(tone(0.3), RATE).loudness is None  # shorter than one 400 ms block
    silent = measure(np.zeros(RATE), RATE)
    assert silent.loudness == -math.inf and silent.to_dict()["loudness"] is None


@pytest.mark.parametrize(
    "rate, seconds", [(44_100, 1), (48_000, 1), (48_000, 7)]
)  # 7 s: streamed in 2 chunks
def test_true_peak_finds_the_peak_between_samples(rate, seconds):
    n = rate * seconds
    wave = faded(np.sin(2 * np.pi * (rate / 4) * np.arange(n) / rate + np.pi / 4), rate=rate)
    m = measure(wave, rate)
    assert m.sample_peak == pytest.approx(-3.01, abs=0.01)
    assert m.true_peak == pytest.approx(0.0, abs=0.05)


def test_clipping_counts_runs_not_single_peaks():
    x = np.zeros((100, 2))
    x[10, 0] = 1.0  # one full-scale sample: a transient
    x[20:25, 0] = 1.0  # five in a row
    x[50:53, 1] = -1.0  # three in a row, negative, other channel
    x[70:72, 1] = 1.0  # two: below the run length
    assert clip_runs(x, 0.999, 3) == (2, 8)
    assert clip_runs(x, 0.999, 1) == (4, 11)


def test_silence_at_the_ends_and_in_between():
    sound = np.concatenate([np.zeros(RATE // 2), tone(1.0, dbfs=-10), np.zeros(RATE), tone(0.5)])
    lead, tail, fraction = silence(sound[:, None], RATE, -60.0)
    assert lead == pytest.approx(0.5, abs=1e-3) and tail == pytest.approx(0.0, abs=1e-3)
    assert fraction == pytest.approx(1.5 / 3.0, abs=0.01)


def test_problems_name_what_failed():
    limits = Limits()
    good = measure(faded(tone(2.0, dbfs=-12)), RATE)
    assert problems(good, limits) == []
    assert problems(measure(np.zeros(RATE), RATE), limits) == ["silent (nothing above -60 dBFS)"]
    clipped = measure(np.clip(3 * tone(2.0, freq=220, dbfs=0), -1, 1), RATE)
    found = problems(clipped, limits)
    assert any(p.startswith("clipped (") for p in found) and any("LUFS above -6" in p for p in found)
    quiet = measure(tone(2.0, dbfs=-50), RATE)
    [why] = problems(quiet, limits)
    assert why.startswith("loudness -53.") and why.endswith("LUFS below -40")
    assert problems(quiet, limits, loudness=-53.0) == []  # its own target replaces the range
    assert "target -20" in problems(good, limits, loudness=-20.0)[0]
    late = measure(np.concatenate([np.zeros(2 * RATE), tone(1.0)]), RATE)
    assert problems(late, limits)[0].startswith("2.00 s of silence before it starts")
    assert "expected 3 s" in problems(good, limits, duration=3.0)[0]
    assert problems(good, limits, duration=2.1) == []  # within 10 %


def test_sidecars_give_descriptions(tmp_path):
    import soundfile

    for name in ("b.wav", "a.flac"):
        soundfile.write(tmp_path / name, tone(0.5), RATE)
    (tmp_path / "b.txt").write_text("  a soft\n tone \n")
    (tmp_path / "notes.md").write_text("not a sound")
    sounds = find_sounds(tmp_path)
    assert [(s.name, s.description) for s in sounds] == [("a.flac", None), ("b.wav", "a soft tone")]


def test_manifest_entries(tmp_path):
    (tmp_path / "door.wav").write_bytes(b"")
    (tmp_path / "rain.wav").write_bytes(b"")
    (tmp_path / "manifest.yaml").write_text(
        "sounds:\n  door.wav: A door slams\n  rain.wav:\n    description: Rain\n    duration: 10\n"
        "    loudness: -23\n"
    )
    door, rain = find_sounds(tmp_path)
    assert (door.description, door.duration, door.loudness) == ("A door slams", None, None)
    assert (rain.description, rain.duration, rain.loudness) == ("Rain", 10.0, -23.0)


@pytest.mark.parametrize(
    "text, message",
    [
        ("sounds:\n  gone.wav: x\n", "sound 'gone.wav': no such file"),
        ("sounds:\n  door.wav:\n    volume: 3\n", "unknown key 'volume'"),
        ("sounds:\n  door.wav:\n    duration: -1\n", "duration -1 seconds is out of range"),
        ("sounds:\n  door.wav:\n    loudness: loud\n", "loudness must be a number of LUFS"),
        ("sounds:\n  door.wav: ''\n", "description must be a non-empty string"),
        ("sounds:\n  ../door.wav: x\n", "a sound is named by its file name"),
        ("- door.wav\n", "a manifest is a mapping with one key, 'sounds'"),
        ("sounds: [unclosed\n", "not valid YAML at line"),
        ("sounds: {}\n", "no sounds to review"),
    ],
)
def test_manifest_errors_name_file_and_entry(tmp_path, text, message):
    (tmp_path / "door.wav").write_bytes(b"")
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(text)
    with pytest.raises(ConfigError) as e:
        find_sounds(tmp_path)
    assert message in str(e.value) and str(manifest) in str(e.value)


def test_sounds_are_read_as_recorded(tmp_path):
    import soundfile

    from blazr.audio.decode import load_audio_channels
    from blazr.errors import AudioError

    stereo = np.stack([tone(0.5, rate=44_100), 0.5 * tone(0.5, rate=44_100)], axis=1)
    soundfile.write(tmp_path / "s.wav", stereo, 44_100, subtype="FLOAT")
    samples, rate = load_audio_channels(tmp_path / "s.wav")
    assert rate == 44_100 and samples.shape == stereo.shape and samples.dtype == np.float32
    np.testing.assert_allclose(samples, stereo, atol=1e-7)
    with pytest.raises(AudioError, match="no such audio file"):
        load_audio_channels(tmp_path / "gone.wav")
