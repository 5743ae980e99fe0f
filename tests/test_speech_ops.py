"""The speech-synthesis ops (lstm, stft, istft, instance_norm, snake, concat) on every backend against the
float64 reference in tests/reference.py, at Kokoro's sizes and at odd ones."""

from __future__ import annotations

import numpy as np
import pytest

from tests import reference
from tests.test_ops import call, check, normal
from tests.tolerances import assert_close


def hann(n: int) -> np.ndarray:
    """torch.hann_window(n, periodic=True)."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


# (70, 256): Kokoro-82M's LSTM over 70 frames, past the 2^16 loop iterations one lavapipe invocation ran right
@pytest.mark.parametrize("steps,hidden", [(1, 1), (7, 3), (33, 64), (20, 200), (70, 256)])
def test_lstm(backend, rng, steps, hidden):
    gates = normal(rng, steps, 8 * hidden)  # (T, 8H)
    w_hh = normal(rng, 2, 4 * hidden, hidden, scale=1 / np.sqrt(hidden))  # (2, 4H, H)
    check(backend, "lstm", gates, w_hh)


def test_lstm_directions_are_independent(backend, rng):
    """The backward half must not see the forward half's state: zeroing one direction's gates leaves the
    other direction's output unchanged."""
    gates, w_hh = normal(rng, 9, 8 * 5), normal(rng, 2, 20, 5)
    quiet = gates.copy()
    quiet[:, 20:] = 0.0
    both, fwd_only = call(backend, "lstm", gates, w_hh), call(backend, "lstm", quiet, w_hh)
    assert np.array_equal(both[:, :5], fwd_only[:, :5])
    assert not np.allclose(both[:, 5:], fwd_only[:, 5:])


def _complex_parts(mag, phase):
    return np.stack([mag * np.cos(phase), mag * np.sin(phase)])


@pytest.mark.parametrize("length,n_fft,hop", [(97, 20, 5), (40, 20, 5), (300, 16, 4), (11, 8, 2)])
def test_stft(backend, rng, length, n_fft, hop):
    x, window = normal(rng, length), hann(n_fft)
    mag, phase = call(backend, "stft", x, window, hop)
    want_mag, want_phase = reference.stft(x, window, hop)
    assert mag.dtype == np.float32 and phase.dtype == np.float32
    assert_close("stft", "f32", mag, want_mag)
    # the phase of a real-valued bin is +-pi by the sign of a rounding error: compare the complex value
    assert_close("stft", "f32", _complex_parts(mag, phase), _complex_parts(want_mag, want_phase))
    assert np.all(np.abs(phase) <= np.float32(np.pi))


def test_stft_dc_and_nyquist_bins_are_real(backend):
    x = (0.5 + (-1.0) ** np.arange(50) * np.linspace(-1, 1, 50)).astype(np.float32)  # strong DC and Nyquist
    mag, phase = call(backend, "stft", x, hann(10), 5)
    want_mag, want_phase = reference.stft(x, hann(10), 5)
    for k in (0, 5):
        np.testing.assert_array_equal(np.sign(np.cos(phase[k])), np.sign(np.cos(want_phase[k])))
        assert np.all(np.isin(np.abs(phase[k]), [0.0, np.float32(np.pi)]))


@pytest.mark.parametrize("frames,n_fft,hop", [(30, 20, 5), (2, 20, 5), (17, 16, 4), (5, 8, 2)])
def test_istft(backend, rng, frames, n_fft, hop):
    mag = np.exp(normal(rng, n_fft // 2 + 1, frames, scale=0.5))  # exp(.) as iSTFTNet's spectra
    phase = np.sin(normal(rng, n_fft // 2 + 1, frames))
    check(backend, "istft", mag, phase, hann(n_fft), hop)


def test_istft_inverts_stft(backend, rng):
    x = normal(rng, 120)
    mag, phase = call(backend, "stft", x, hann(20), 5)
    back = call(backend, "istft", mag, phase, hann(20), 5)
    np.testing.assert_allclose(back, x, atol=1e-5)


@pytest.mark.parametrize("channels,length", [(1, 1), (7, 33), (64, 4097)])
def test_instance_norm(backend, rng, channels, length):
    x = normal(rng, channels, length, scale=3.0) + 2.0
    check(backend, "instance_norm", x, normal(rng, channels), normal(rng, channels), 1e-5)


@pytest.mark.parametrize("channels,length", [(1, 1), (7, 33), (64, 4097)])
def test_snake(backend, rng, channels, length):
    alpha = np.abs(normal(rng, channels)) + 0.2
    check(backend, "snake", normal(rng, channels, length, scale=2.0), alpha)


@pytest.mark.parametrize("m,n,length", [(1, 1, 1), (3, 2, 7), (64, 2, 4097)])
def test_concat(backend, rng, m, n, length):
    check(backend, "concat", normal(rng, m, length), normal(rng, n, length))


@pytest.mark.parametrize("lead,la,lb", [((1,), 1, 1), ((5, 3), 7, 2), ((300, 1), 64, 513)])
def test_concat_last_axis(backend, rng, lead, la, lb):
    check(backend, "concat", normal(rng, *lead, la), normal(rng, *lead, lb), axis=-1)
