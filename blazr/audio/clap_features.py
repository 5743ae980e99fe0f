"""CLAP's audio input: transformers' ClapFeatureExtractor (preprocessor_config.json) in numpy.

A clip at the model's rate (48 kHz) becomes a log-mel spectrogram (frames, mel bins):

* a clip longer than max_length_s is cut to its first max_length_s seconds. transformers' "rand_trunc" takes a
  random crop there; a review must give the same verdict twice, so blazr takes the start;
* a shorter one is padded: "repeatpad" repeats it whole as often as it fits, then pads zeros; "repeat"
  repeats it and cuts; "pad" pads zeros;
* the STFT: Hann window (periodic) of fft_window_size, hop hop_length, centred with reflect padding; its
  values pass through complex64 as transformers' spectrogram() stores them; power 2; Slaney-style mel filters
  (Slaney mel scale and area normalisation, frequency_min..frequency_max); 10 log10(max(mel, 1e-10)) dB,
  clipped top_db below the peak when top_db is set.

The "fusion" truncation (four mel views of a long clip for fused checkpoints) is not done: blazr runs CLAP's
unfused audio tower only, and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from blazr.errors import CheckpointError, UnsupportedError

MEL_FLOOR = 1e-10  # transformers' mel_floor and power_to_db's min_value


@dataclass(frozen=True)
class ClapFeatures:
    """The preprocessor_config.json of a ClapModel directory (its defaults are transformers')."""

    feature_size: int = 64  # mel bins
    sampling_rate: int = 48_000
    hop_length: int = 480
    max_length_s: float = 10
    fft_window_size: int = 1024
    frequency_min: float = 0.0
    frequency_max: float = 14_000.0
    top_db: float | None = None
    truncation: str = "fusion"
    padding: str = "repeatpad"

    @classmethod
    def load(cls, directory: Path) -> ClapFeatures:
        path = directory / "preprocessor_config.json"
        if not path.is_file():
            raise CheckpointError(
                f"{directory}: no preprocessor_config.json (CLAP's feature extractor settings)"
            )
        config = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        features = cls(**{k: v for k, v in config.items() if k in known})
        if features.truncation != "rand_trunc":
            raise UnsupportedError(
                f"CLAP feature truncation {features.truncation!r}: blazr runs the unfused audio tower, whose "
                "features are cut with 'rand_trunc'"
            )
        if features.padding not in ("repeatpad", "repeat", "pad"):
            raise UnsupportedError(f"CLAP feature padding {features.padding!r} is not one blazr knows")
        return features

    @property
    def max_samples(self) -> int:
        return int(self.max_length_s * self.sampling_rate)

    def __call__(self, waveform: np.ndarray) -> np.ndarray:
        """waveform (N,) float at sampling_rate -> log-mel features (frames, feature_size) float32."""
        return log_mel(self.fit(np.asarray(waveform, dtype=np.float64)), self)

    def fit(self, wave: np.ndarray) -> np.ndarray:
        """The clip cut or padded to max_samples (see the module docstring)."""
        n, total = len(wave), self.max_samples
        if n >= total:
            return wave[:total]
        if self.padding == "repeat":
            return np.tile(wave, total // n + 1)[:total]
        if self.padding == "repeatpad":
            wave = np.tile(wave, total // n)
        return np.pad(wave, (0, total - len(wave)))


def hertz_to_slaney(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    mels = 3.0 * freq / 200.0
    log = freq >= 1000.0
    return np.where(log, 15.0 + np.log(np.maximum(freq, 1e-300) / 1000.0) * (27.0 / np.log(6.4)), mels)


def slaney_to_hertz(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    freq = 200.0 * mels / 3.0
    return np.where(mels >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels - 15.0)), freq)


def slaney_filters(bins: int, mels: int, low: float, high: float, rate: int) -> np.ndarray:
    """(bins, mels) triangular filters evenly spaced on Slaney's mel scale, each scaled to unit area."""
    edges = slaney_to_hertz(np.linspace(hertz_to_slaney(low), hertz_to_slaney(high), mels + 2))  # (mels + 2,)
    fft_freqs = np.linspace(0, rate // 2, bins)  # (bins,)
    slopes = edges[None, :] - fft_freqs[:, None]  # (bins, mels + 2)
    diff = np.diff(edges)  # (mels + 1,)
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(0.0, np.minimum(down, up))  # (bins, mels)
    return filters * (2.0 / (edges[2 : mels + 2] - edges[:mels]))[None, :]


def log_mel(wave: np.ndarray, f: ClapFeatures) -> np.ndarray:
    """(frames, feature_size) float32 log-mel dB of wave (N,), as transformers' spectrogram() makes it."""
    n_fft, hop = f.fft_window_size, f.hop_length
    padded = np.pad(wave, (n_fft // 2, n_fft // 2), mode="reflect")  # (N + n_fft,)
    frames = 1 + (len(padded) - n_fft) // hop
    index = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]  # (frames, n_fft)
    window = np.hanning(n_fft + 1)[:-1]  # periodic Hann
    spectrum = np.fft.rfft(padded[index] * window, axis=1).astype(np.complex64)  # (frames, bins)
    power = np.abs(spectrum, dtype=np.float64) ** 2  # (frames, bins)
    filters = slaney_filters(
        n_fft // 2 + 1, f.feature_size, f.frequency_min, f.frequency_max, f.sampling_rate
    )
    mel = np.maximum(MEL_FLOOR, power @ filters)  # (frames, mels)
    db = 10.0 * np.log10(mel)
    if f.top_db is not None:
        db = np.maximum(db, db.max() - f.top_db)
    return db.astype(np.float32)
