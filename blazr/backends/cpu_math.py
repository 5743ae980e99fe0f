"""Float32 math for numba kernels that vectorises: libm's exp, erf and tanh are scalar calls in numba (it has
no SVML here) and keep the loop around them scalar (2.5-12 ns a value against 0.2-1 ns vectorised). Inline
functions of one float32 value; a kernel calling them should use error_model="numpy": numba's default checks
every division for zero, and that check alone keeps a loop scalar.

exp_neg: e^a for a <= 0, a table gather times a polynomial (relative error 1e-7). erfc_pos: Numerical Recipes'
erfcc (relative error 1.2e-7). tanh: Eigen's rational minimax form (generic_fast_tanh_float, as XLA uses; max
abs error 3.2e-7).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_TANH_P = (
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
_TANH_CLAMP = 7.90531110763549805  # tanh is +-1 in float32 beyond
_EXP_NEG = np.exp(-np.arange(89.0)).astype(np.float32)  # (89,) e^-n, n = 0..88
_E_HALF = np.float32(math.exp(-0.5))


@njit(inline="always")
def exp_neg(a):
    """e^a for a float32 a <= 0 (e^-87 below that): e^-n from a table (a gather, which vectorises; numba has
    no scalar bit cast to build 2^k) times e^(r - 1/2) by a degree-7 Taylor polynomial, |r - 1/2| <= 1/2
    (relative error 1e-7)."""
    a = max(a, np.float32(-87.0))
    n = np.int32(-a)  # floor(-a)
    r = a + np.float32(n) + np.float32(0.5)  # in (-0.5, 0.5]
    p = np.float32(1.0 / 5040.0) * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    return _EXP_NEG[n] * _E_HALF * p


@njit(inline="always")
def erfc_pos(z):
    """erfc(z) for z >= 0: Numerical Recipes' erfcc, t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2)."""
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * z)
    p = np.float32(0.17087277) * t + np.float32(-0.82215223)
    p = p * t + np.float32(1.48851587)
    p = p * t + np.float32(-1.13520398)
    p = p * t + np.float32(0.27886807)
    p = p * t + np.float32(-0.18628806)
    p = p * t + np.float32(0.09678418)
    p = p * t + np.float32(0.37409196)
    p = p * t + np.float32(1.00002368)
    p = p * t + np.float32(-1.26551223)
    return t * exp_neg(-z * z + p)


@njit(inline="always")
def tanh(u):
    """tanh of a float32 u (clamped to where float32's tanh is not yet +-1), Horner steps written out: a loop
    over the coefficient tuple stays a loop in LLVM and keeps the caller's loop from vectorising."""
    u = min(max(u, np.float32(-_TANH_CLAMP)), np.float32(_TANH_CLAMP))
    u2 = u * u
    p = np.float32(_TANH_P[0]) * u2 + np.float32(_TANH_P[1])
    p = p * u2 + np.float32(_TANH_P[2])
    p = p * u2 + np.float32(_TANH_P[3])
    p = p * u2 + np.float32(_TANH_P[4])
    p = p * u2 + np.float32(_TANH_P[5])
    p = p * u2 + np.float32(_TANH_P[6])
    q = np.float32(_TANH_Q[0]) * u2 + np.float32(_TANH_Q[1])
    q = q * u2 + np.float32(_TANH_Q[2])
    q = q * u2 + np.float32(_TANH_Q[3])
    return u * p / q
