"""iSTFTNet's harmonic source (hn-NSF's SineGen and SourceModuleHnNSF), on the host.

From the predicted F0 (one value per half frame) it builds, at the audio rate, sines at F0 and its first 8
overtones (amplitude 0.1, zero where F0 <= 10 Hz, i.e. unvoiced), merged by a Linear(9 -> 1) and tanh.
The input is a few hundred values and the output one float per sample, so the host computes it (float64,
then float32) and the backend takes it from the STFT on.

Noise: the training code adds a random initial phase to each overtone and Gaussian noise (std 0.003
voiced, 0.1 / 3 unvoiced). noise=False leaves both out, which is what tests/parity/make_kokoro_reference.py
does to the reference; noise=True draws them from `rng`.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 24000  # Kokoro's Generator fixes its SineGen at 24 kHz
HARMONICS = 9  # F0 and 8 overtones
SINE_AMP, NOISE_STD, VOICED_THRESHOLD = 0.1, 0.003, 10.0


def _linear_resize(x: np.ndarray, ratio: float, n_out: int) -> np.ndarray:
    """F.interpolate(mode="linear", align_corners=False) along axis 0 with scale 1 / ratio: output i reads
    input position (i + 0.5) * ratio - 0.5, clamped at 0, between its two neighbours."""
    src = np.maximum((np.arange(n_out) + 0.5) * ratio - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), len(x) - 1)
    hi = np.minimum(lo + 1, len(x) - 1)
    frac = (src - lo)[:, None]
    return x[lo] * (1.0 - frac) + x[hi] * frac


def harmonic_source(
    f0: np.ndarray,
    upsample: int,
    weight: np.ndarray,
    bias: np.ndarray,
    noise: bool = False,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """f0 (F,) Hz per F0 step, upsample (samples per step), weight (1, 9) and bias (1,) of l_linear
    -> the excitation (F * upsample,) float32."""
    f0_up = np.repeat(np.asarray(f0, dtype=np.float64), upsample)  # (L,): nn.Upsample, nearest
    n = len(f0_up)
    fn = f0_up[:, None] * np.arange(1, HARMONICS + 1)[None, :]  # (L, 9)
    rad = (fn / SAMPLE_RATE) % 1.0
    if noise:
        rad[0, 1:] += rng.random(HARMONICS - 1)  # the overtones' random initial phase
    # phase integrated at the F0 rate, then stretched back (SineGen's interpolate - cumsum - interpolate)
    coarse = _linear_resize(rad, upsample, n // upsample)  # (F, 9)
    phase = np.cumsum(coarse, axis=0) * 2.0 * np.pi
    phase = _linear_resize(phase * upsample, 1.0 / upsample, n)  # (L, 9)
    uv = (f0_up > VOICED_THRESHOLD).astype(np.float64)[:, None]  # (L, 1)
    sines = np.sin(phase) * SINE_AMP * uv
    if noise:
        amp = uv * NOISE_STD + (1.0 - uv) * SINE_AMP / 3.0
        sines += amp * rng.standard_normal(sines.shape)
    merged = np.tanh(sines @ np.asarray(weight, np.float64).T + np.asarray(bias, np.float64))  # (L, 1)
    return merged[:, 0].astype(np.float32)
