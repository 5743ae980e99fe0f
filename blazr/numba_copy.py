"""Element-loop copies for numba kernels, in place of array-to-array slice assignment (`a[i] = b[j]`).

Why: numba lowers a slice copy with a shape check whose error message is an f-string of the two shapes, and it
compiles that message's code (str of each dimension, joins) once per process and per pair of ranks: ~13 s of a
cold `blazr generate` on SmolLM2 (50 s -> 37 s with the kernels on its path changed, 2-core AMD EPYC, Zen 1
class). Shapes are the caller's to make equal: these check nothing, as the kernels around them do not.
Filling with a scalar (`a[i:j] = 0.0`) compiles no message and stays as it is."""

from __future__ import annotations

from numba import njit


@njit(inline="always")
def copy1(dst, src):
    """dst[i] = src[i] for i < src.shape[0] (1-D arrays)."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@njit(inline="always")
def copy2(dst, src):
    """dst[i, j] = src[i, j] over src's shape (2-D arrays)."""
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = src[i, j]


@njit(inline="always")
def add1(dst, src):
    """dst[i] += src[i] for i < src.shape[0] (1-D arrays)."""
    for i in range(src.shape[0]):
        dst[i] += src[i]
