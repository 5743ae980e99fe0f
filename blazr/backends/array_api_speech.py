"""The speech-synthesis ops of backends/base.py written against an array module `xp` (a mixin of
ArrayAPIBackend): lstm (bidirectional recurrence), stft / istft (iSTFTNet's spectra), instance_norm (AdaIN),
snake (the periodic activation of iSTFTNet's residual blocks) and concat (channel stacking).
"""

from __future__ import annotations

from blazr.backends.base import Array


class SpeechOps:
    """Needs self.xp (the array module)."""

    def lstm(self, gates: Array, w_hh: Array) -> Array:
        xp = self.xp
        steps, width = gates.shape
        h = width // 8
        out = xp.empty((steps, 2 * h), dtype=gates.dtype)  # (T, 2H): forward | backward
        for d in (0, 1):
            w_t = xp.ascontiguousarray(w_hh[d].T)  # (H, 4H)
            hidden = xp.zeros((h,), dtype=gates.dtype)  # (H,)
            cell = xp.zeros((h,), dtype=gates.dtype)  # (H,)
            order = range(steps) if d == 0 else range(steps - 1, -1, -1)
            for t in order:
                z = gates[t, 4 * h * d : 4 * h * (d + 1)] + hidden @ w_t  # (4H,): i, f, g, o
                i, f, o = (_sigmoid(xp, z[k * h : (k + 1) * h]) for k in (0, 1, 3))
                cell = f * cell + i * xp.tanh(z[2 * h : 3 * h])
                hidden = o * xp.tanh(cell)
                out[t, h * d : h * (d + 1)] = hidden
        return out

    def stft(self, x: Array, window: Array, hop: int) -> tuple[Array, Array]:
        xp = self.xp
        n_fft = window.shape[0]
        half = n_fft // 2
        padded = xp.pad(x, (half, half), mode="reflect")  # (L + N,): torch.stft's center=True
        frames = x.shape[0] // hop + 1
        idx = xp.arange(frames)[:, None] * hop + xp.arange(n_fft)[None, :]  # (F, N)
        spec = xp.fft.rfft(padded[idx] * window[None, :], axis=1).T  # (N/2 + 1, F) complex
        mag = xp.abs(spec).astype(x.dtype)
        phase = xp.arctan2(spec.imag, spec.real).astype(x.dtype)
        return mag, phase

    def istft(self, mag: Array, phase: Array, window: Array, hop: int) -> Array:
        xp = self.xp
        n_fft = window.shape[0]
        bins, frames = mag.shape
        spec = (mag * xp.cos(phase) + 1j * (mag * xp.sin(phase))).T  # (F, N/2 + 1) complex
        chunks = xp.fft.irfft(spec, n=n_fft, axis=1) * window[None, :]  # (F, N) windowed frames
        full_len = n_fft + hop * (frames - 1)
        signal = xp.zeros((full_len,), dtype=xp.float64)  # overlap-add, then the window-square envelope
        envelope = xp.zeros((full_len,), dtype=xp.float64)
        square = (window * window).astype(xp.float64)
        for f in range(frames):
            signal[f * hop : f * hop + n_fft] += chunks[f]
            envelope[f * hop : f * hop + n_fft] += square
        half = n_fft // 2
        out = signal[half : full_len - half] / envelope[half : full_len - half]  # (hop * (F - 1),)
        return out.astype(mag.dtype)

    def instance_norm(self, x: Array, scale: Array, shift: Array, eps: float) -> Array:
        xp = self.xp
        mean = x.mean(axis=1, keepdims=True)  # (C, 1)
        centred = x - mean  # (C, L)
        var = (centred * centred).mean(axis=1, keepdims=True)  # (C, 1), biased as InstanceNorm1d's
        out = centred * (scale[:, None] / xp.sqrt(var + eps))
        out += shift[:, None]
        return out.astype(x.dtype)

    def snake(self, x: Array, alpha: Array) -> Array:
        xp = self.xp
        s = xp.sin(alpha[:, None] * x)  # (C, L)
        return (x + s * s / alpha[:, None]).astype(x.dtype)

    def concat(self, a: Array, b: Array, axis: int = 0) -> Array:
        return self.xp.concatenate([a, b], axis=_concat_axis(axis))


def _sigmoid(xp, z: Array) -> Array:
    """1 / (1 + e^-z) from e^-|z| <= 1, so that nothing overflows."""
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0, e) / (1.0 + e)


def _concat_axis(axis: int) -> int:
    if axis not in (0, -1):
        raise ValueError(f"concat: axis must be 0 or -1, not {axis}")
    return axis
