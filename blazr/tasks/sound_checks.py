"""Checks a rendered sound needs no model for: loudness, peaks and clipping, silence, duration.

Every measure is taken on the file as recorded (all channels, its own sample rate):

* integrated loudness in LUFS (ITU-R BS.1770-4 / EBU R128: K-weighting, 400 ms blocks with 75 % overlap,
  absolute gate at -70 LUFS and relative gate 10 LU below), measured by pyloudnorm; None for a sound shorter
  than one block or with more than 5 channels (BS.1770 weights only 5), -inf for digital silence;
* sample peak (dBFS) and true peak (dBTP: BS.1770 annex 2's oversampled peak; the signal is upsampled to at
  least 176.4 kHz with soxr's high-quality filter, as the annex asks of 44.1 / 48 kHz audio);
* clipping: runs of at least `clip_run` neighbouring samples of one channel at or above `clip_level` (a single
  full-scale sample is a loud transient; several in a row are a flattened wave top);
* silence: a sample is silent when every channel is at or below `silence_level` dBFS; leading and trailing
  silence are the silent stretches at either end, and the silent fraction counts 10 ms frames that are silent
  throughout.

`problems()` turns the measures into the reasons a sound fails, against Limits (the command's flags) and the
sound's own expectations (its manifest entry's duration and loudness target).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import soxr

LOUDNESS_CHANNELS = 5  # BS.1770 gives channel weights for L, R, C, Ls, Rs
TRUE_PEAK_RATE = 176_400  # BS.1770 annex 2: 4x oversampling of 44.1 kHz; higher rates need none
TRUE_PEAK_CHUNK = 1 << 18  # samples per streamed step of the oversampler
FRAME_SECONDS = 0.010  # the frame of the silent-fraction measure


@dataclass(frozen=True)
class Limits:
    """When a sound fails; the command's flags (docs/cli.md, "blazr sound-review")."""

    min_loudness: float = -40.0  # LUFS; quieter is near silence (used when the sound has no target)
    max_loudness: float = -6.0  # LUFS; louder is crushed by a limiter or clipping
    loudness_tolerance: float = 2.0  # LU either side of a sound's own target
    max_true_peak: float = 0.0  # dBTP; above full scale a playback converter clips
    clip_level: float = -0.01  # dBFS a sample must reach to count as clipped
    clip_run: int = 3  # neighbouring clipped samples that make a clip
    silence_level: float = -60.0  # dBFS at or below which a sample is silent
    max_lead: float = 1.0  # seconds of silence allowed before the sound starts
    max_tail: float = 2.0  # seconds of silence allowed after it ends
    max_silence: float = 0.8  # fraction of the sound that may be silent
    duration_tolerance: float = 0.1  # fraction of a sound's expected duration it may be off by


@dataclass(frozen=True)
class Measures:
    """What was measured on one sound."""

    duration: float  # seconds
    sample_rate: int
    channels: int
    loudness: float | None  # LUFS (integrated); None: not measurable (see the module docstring)
    sample_peak: float  # dBFS
    true_peak: float  # dBTP
    clips: int  # runs of clipped samples, all channels
    clipped_samples: int
    lead_silence: float  # seconds
    tail_silence: float  # seconds
    silent_fraction: float  # 0..1

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-safe: -inf (digital silence) becomes None."""
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}


def decibels(amplitude: float) -> float:
    """20 log10 |amplitude|; -inf for 0."""
    return 20.0 * math.log10(amplitude) if amplitude > 0 else -math.inf


def measure(samples: np.ndarray, rate: int, limits: Limits | None = None) -> Measures:
    """Measures of float samples (N, channels) or (N,) at `rate` Hz, full scale 1.0. The clipping and
    silence levels of `limits` decide what is counted as clipped or silent."""
    limits = limits or Limits()
    samples = np.asarray(samples, dtype=np.float64)
    samples = samples[:, None] if samples.ndim == 1 else samples  # (N, C)
    n, channels = samples.shape
    clips, clipped = clip_runs(samples, 10.0 ** (limits.clip_level / 20.0), limits.clip_run)
    lead, tail, fraction = silence(samples, rate, limits.silence_level)
    return Measures(
        duration=n / rate,
        sample_rate=rate,
        channels=channels,
        loudness=integrated_loudness(samples, rate),
        sample_peak=decibels(float(np.abs(samples).max())),
        true_peak=true_peak(samples, rate),
        clips=clips,
        clipped_samples=clipped,
        lead_silence=lead,
        tail_silence=tail,
        silent_fraction=fraction,
    )


def integrated_loudness(samples: np.ndarray, rate: int) -> float | None:
    """BS.1770-4 integrated loudness (LUFS) of (N, C) samples; None when not measurable."""
    import pyloudnorm

    n, channels = samples.shape
    meter = pyloudnorm.Meter(rate)
    if n < meter.block_size * rate or channels > LOUDNESS_CHANNELS:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):  # silence: every block gated out
        value = float(meter.integrated_loudness(samples if channels > 1 else samples[:, 0]))
    return value if not math.isnan(value) else -math.inf


def true_peak(samples: np.ndarray, rate: int) -> float:
    """dBTP: the peak of the signal upsampled to at least TRUE_PEAK_RATE (BS.1770-4 annex 2). Streamed in
    chunks, so a long file never exists at the oversampled rate all at once."""
    peak = float(np.abs(samples).max())
    factor = max(1, math.ceil(TRUE_PEAK_RATE / rate))
    if factor == 1:
        return decibels(peak)
    n, channels = samples.shape
    stream = soxr.ResampleStream(rate, rate * factor, channels, dtype="float64", quality="HQ")
    for start in range(0, n, TRUE_PEAK_CHUNK):
        chunk = np.ascontiguousarray(samples[start : start + TRUE_PEAK_CHUNK])  # (chunk, C)
        up = stream.resample_chunk(chunk, last=start + TRUE_PEAK_CHUNK >= n)  # (chunk * factor, C)
        if up.size:
            peak = max(peak, float(np.abs(up).max()))
    return decibels(peak)


def clip_runs(samples: np.ndarray, level: float, run: int) -> tuple[int, int]:
    """(runs, samples in them): stretches of >= `run` neighbouring samples of a channel with |x| >= level."""
    runs = clipped = 0
    for channel in samples.T:  # (N,)
        hot = np.concatenate(([0], (np.abs(channel) >= level).astype(np.int8), [0]))  # (N + 2,)
        edges = np.diff(hot)  # (N + 1,) +1 where a stretch starts, -1 after it ends
        lengths = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)  # (stretches,)
        long = lengths[lengths >= run]
        runs, clipped = runs + len(long), clipped + int(long.sum())
    return runs, clipped


def silence(samples: np.ndarray, rate: int, level_db: float) -> tuple[float, float, float]:
    """(leading seconds, trailing seconds, silent fraction of 10 ms frames) at the silence level."""
    level = 10.0 ** (level_db / 20.0)
    loud = np.abs(samples).max(axis=1) > level  # (N,) any channel above the level
    n = len(loud)
    where = np.flatnonzero(loud)
    if len(where) == 0:
        return n / rate, n / rate, 1.0
    frame = max(1, round(FRAME_SECONDS * rate))
    frames = -(-n // frame)
    padded = np.zeros(frames * frame, dtype=bool)
    padded[:n] = loud
    silent_frames = ~padded.reshape(frames, frame).any(axis=1)  # (frames,)
    return float(where[0] / rate), float((n - 1 - where[-1]) / rate), float(silent_frames.mean())


def problems(
    m: Measures, limits: Limits, duration: float | None = None, loudness: float | None = None
) -> list[str]:
    """Why the sound fails (empty: it passes). `duration` (seconds) and `loudness` (LUFS) are the sound's own
    expectations, from its manifest entry."""
    out = []
    if m.lead_silence >= m.duration:
        return [f"silent (nothing above {limits.silence_level:g} dBFS)"]
    out += _loudness_problems(m, limits, loudness)
    if m.clips:
        out.append(f"clipped ({m.clips} runs, {m.clipped_samples} samples at {limits.clip_level:g} dBFS)")
    if m.true_peak > limits.max_true_peak:
        out.append(f"true peak {m.true_peak:+.1f} dBTP above {limits.max_true_peak:g}")
    if m.lead_silence > limits.max_lead:
        out.append(f"{m.lead_silence:.2f} s of silence before it starts (max {limits.max_lead:g})")
    if m.tail_silence > limits.max_tail:
        out.append(f"{m.tail_silence:.2f} s of silence after it ends (max {limits.max_tail:g})")
    if m.silent_fraction > limits.max_silence:
        out.append(f"{m.silent_fraction:.0%} silent (max {limits.max_silence:.0%})")
    if duration is not None and abs(m.duration - duration) > limits.duration_tolerance * duration:
        out.append(
            f"lasts {m.duration:.2f} s, expected {duration:g} s (within {limits.duration_tolerance:.0%})"
        )
    return out


def _loudness_problems(m: Measures, limits: Limits, target: float | None) -> list[str]:
    if m.loudness is None:
        return []  # too short or too many channels to measure: nothing to judge
    if target is not None:
        if abs(m.loudness - target) > limits.loudness_tolerance:
            return [
                f"loudness {m.loudness:.1f} LUFS, target {target:g} (within {limits.loudness_tolerance:g} LU)"
            ]
        return []
    if m.loudness < limits.min_loudness:
        return [f"loudness {m.loudness:.1f} LUFS below {limits.min_loudness:g}"]
    if m.loudness > limits.max_loudness:
        return [f"loudness {m.loudness:.1f} LUFS above {limits.max_loudness:g}"]
    return []
