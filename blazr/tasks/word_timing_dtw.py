"""Dynamic time warping for word alignment (openai-whisper's dtw_cpu), compiled with numba.

A text of N tokens over M audio positions: the cost matrix is at most ~450 x 1500, and the quadratic loop
in Python would take seconds per window."""

from __future__ import annotations

import numba
import numpy as np

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)


@numba.njit(cache=True)
def dtw_path(x: np.ndarray) -> np.ndarray:
    """x (N, M) float64 -> (2, steps) int64: the row and column of each step of the cheapest path from
    (0, 0) to (N - 1, M - 1) moving down, right or diagonally (ties: right, as openai-whisper breaks them)."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf)
    trace = -np.ones((n + 1, m + 1), dtype=np.int8)
    cost[0, 0] = 0.0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = x[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    steps = np.empty((2, n + m), dtype=np.int64)
    k = 0
    while i > 0 or j > 0:
        steps[0, k], steps[1, k] = i - 1, j - 1
        k += 1
        t = trace[i, j]
        if t == 0:
            i -= 1
            j -= 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return steps[:, :k][:, ::-1].copy()
