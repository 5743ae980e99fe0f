"""The inverse of the monotonic rational-quadratic spline (Durkan et al., "Neural Spline Flows") with linear
tails, as VITS's stochastic duration predictor runs it (its transforms.py, tails="linear").

It runs on the host in float32: its input is the duration predictor's 2 channels per phoneme (a few hundred
numbers a sentence), and the durations it yields decide the output length, which the host needs anyway.
"""

from __future__ import annotations

import numpy as np

MIN_BIN_WIDTH = MIN_BIN_HEIGHT = MIN_DERIVATIVE = 1e-3


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.float32(0), x).astype(np.float32)


def _bins(unnormalized: np.ndarray, low: float, high: float, minimum: float) -> tuple[np.ndarray, np.ndarray]:
    """(T, K) logits -> knot positions (T, K + 1) from low to high and bin sizes (T, K)."""
    k = unnormalized.shape[-1]
    e = np.exp(unnormalized - unnormalized.max(axis=-1, keepdims=True))
    sizes = minimum + (1 - minimum * k) * (e / e.sum(axis=-1, keepdims=True))  # (T, K)
    knots = np.zeros(unnormalized.shape[:-1] + (k + 1,), dtype=np.float32)  # (T, K + 1)
    knots[..., 1:] = np.cumsum(sizes, axis=-1)
    knots = (high - low) * knots + low
    knots[..., 0], knots[..., -1] = low, high
    return knots.astype(np.float32), np.diff(knots, axis=-1).astype(np.float32)


def spline_inverse(
    y: np.ndarray, widths: np.ndarray, heights: np.ndarray, derivatives: np.ndarray, bound: float
) -> np.ndarray:
    """y (T,) -> x (T,) with spline(x) = y. widths, heights (T, K) and derivatives (T, K - 1) are the
    unnormalized bin parameters; outside [-bound, bound] the map is the identity (the linear tails)."""
    y = y.astype(np.float32)
    inside = (y >= -bound) & (y <= bound)
    out = y.copy()
    if not inside.any():
        return out
    y_in = y[inside]
    # the tails' slope 1 at both ends: softplus(constant) + MIN_DERIVATIVE == 1
    edge = np.float32(np.log(np.exp(1 - MIN_DERIVATIVE) - 1))
    d = np.pad(derivatives[inside], ((0, 0), (1, 1)), constant_values=edge)  # (N, K + 1)
    d = (MIN_DERIVATIVE + _softplus(d)).astype(np.float32)
    cum_w, w = _bins(widths[inside], -bound, bound, MIN_BIN_WIDTH)  # (N, K + 1), (N, K)
    cum_h, h = _bins(heights[inside], -bound, bound, MIN_BIN_HEIGHT)
    search = cum_h.copy()
    search[:, -1] += 1e-6
    b = np.clip((y_in[:, None] >= search).sum(axis=1) - 1, 0, w.shape[1] - 1)  # (N,) bin of each value
    rows = np.arange(len(y_in))
    x0, bw, y0, bh = cum_w[rows, b], w[rows, b], cum_h[rows, b], h[rows, b]
    delta = bh / bw
    d0, d1 = d[rows, b], d[rows, b + 1]
    dy = y_in - y0
    # solve the bin's rational quadratic for theta in [0, 1]: a theta^2 + b theta + c = 0
    qa = dy * (d0 + d1 - 2 * delta) + bh * (delta - d0)
    qb = bh * d0 - dy * (d0 + d1 - 2 * delta)
    qc = -delta * dy
    disc = np.maximum(qb * qb - 4 * qa * qc, 0).astype(np.float32)
    theta = (2 * qc) / (-qb - np.sqrt(disc))
    out[inside] = (theta * bw + x0).astype(np.float32)
    return out
