"""Whisper's log-mel front end in numpy: the same numbers as openai-whisper's `whisper.audio.log_mel_spectrogram`
(torch.stft, periodic Hann, centred reflect padding) without torch, so speech needs only the core install."""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30  # seconds of audio in one encoder window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in one encoder window

# Frames per FFT batch: bounds the float64 scratch to a few MB however long the audio is, and keeps it in cache.
_BATCH_FRAMES = 2048


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default, htk=False): linear below 1 kHz, logarithmic above."""
    f_sp = 200.0 / 3
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    hz = np.asarray(hz, dtype=np.float64)
    log_part = min_log_mel + np.log(np.maximum(hz, min_log_hz) / min_log_hz) / logstep
    return np.where(hz >= min_log_hz, log_part, hz / f_sp)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    mel = np.asarray(mel, dtype=np.float64)
    log_part = min_log_hz * np.exp(logstep * (np.maximum(mel, min_log_mel) - min_log_mel))
    return np.where(mel >= min_log_mel, log_part, mel * f_sp)


@cache
def mel_filters(n_mels: int) -> np.ndarray:
    """Triangular mel filterbank (n_mels, N_FFT // 2 + 1) as librosa.filters.mel(sr=16000, n_fft=400, n_mels)
    builds it (Slaney scale, each triangle scaled to unit area), which is what Whisper's mel_filters.npz holds.
    Cached and read-only: callers share one array."""
    fft_hz = np.fft.rfftfreq(N_FFT, d=1.0 / SAMPLE_RATE)  # (201,)
    # n_mels + 2 edges evenly spaced in mel from 0 Hz to Nyquist: triangle i rises on edge i..i+1, falls on i+1..i+2
    edges_mel = np.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2)  # (n_mels+2,)
    edges_hz = _mel_to_hz(edges_mel)  # (n_mels+2,)
    widths = np.diff(edges_hz)  # (n_mels+1,)
    ramps = edges_hz[:, None] - fft_hz[None, :]  # (n_mels+2, 201)
    rising = -ramps[:-2] / widths[:-1, None]  # (n_mels, 201)
    falling = ramps[2:] / widths[1:, None]  # (n_mels, 201)
    weights = np.maximum(0.0, np.minimum(rising, falling))  # (n_mels, 201)
    weights *= (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]  # Slaney area normalisation
    out = weights.astype(np.float32)
    out.flags.writeable = False
    return out


@cache
def _hann_window() -> np.ndarray:
    """Periodic Hann (torch.hann_window's default): the window of an N+1 symmetric Hann without its last point."""
    n = np.arange(N_FFT, dtype=np.float64)
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)  # (400,)
    window.flags.writeable = False
    return window


def pad_or_trim(array: np.ndarray, length: int = N_SAMPLES, *, axis: int = -1) -> np.ndarray:
    """Cut `array` to `length` along `axis`, or zero-pad it at the end, as the Whisper encoder expects."""
    size = array.shape[axis]
    if size > length:
        return np.take(array, np.arange(length), axis=axis)
    if size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        return np.pad(array, widths)
    return array


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """Log-mel spectrogram (n_mels, len(audio + padding) // HOP_LENGTH) of 16 kHz mono audio, float32.

    Matches whisper.audio.log_mel_spectrogram: `padding` zero samples appended, STFT with a centred window and
    reflect padding, the last frame dropped, power through the mel filters, log10 floored at 1e-10, clamped to
    8 below the maximum, then (x + 4) / 4."""
    samples = np.asarray(audio, dtype=np.float32).reshape(-1)  # (n,)
    if padding > 0:
        samples = np.concatenate([samples, np.zeros(padding, dtype=np.float32)])
    n_frames = samples.shape[0] // HOP_LENGTH  # torch.stft gives 1 + n // hop frames; Whisper drops the last
    filters = mel_filters(n_mels).astype(np.float64)  # (n_mels, 201)
    if n_frames == 0:
        return np.zeros((n_mels, 0), dtype=np.float32)

    # Each batch of frames goes to float64 (the float64 window promotes it): torch works in float32, so computing
    # closer to exact keeps the gap to torch down to its own rounding. Whole-audio arrays stay float32 for memory.
    half = N_FFT // 2
    padded = np.pad(samples, (half, half), mode="reflect")  # (n + 400,)
    frames = sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]  # (n_frames, 400), a view
    window = _hann_window()  # (400,) float64
    mel = np.empty((n_frames, n_mels), dtype=np.float32)  # (frames, n_mels)
    for start in range(0, n_frames, _BATCH_FRAMES):
        spectrum = np.fft.rfft(frames[start : start + _BATCH_FRAMES] * window, axis=-1)  # (batch, 201)
        power = spectrum.real**2 + spectrum.imag**2  # (batch, 201)
        mel[start : start + _BATCH_FRAMES] = power @ filters.T  # (batch, n_mels)

    log_spec = np.log10(np.maximum(mel, np.float32(1e-10)))  # (frames, n_mels)
    log_spec = np.maximum(log_spec, log_spec.max() - np.float32(8.0))
    return np.ascontiguousarray(((log_spec + np.float32(4.0)) / np.float32(4.0)).T)  # (n_mels, frames)
