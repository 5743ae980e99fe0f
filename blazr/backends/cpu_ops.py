"""numba kernels for the CPU backend's small per-token ops: RMSNorm, LayerNorm, RoPE, KV-cache writes, the
activations and gated products, and (from blazr.backends.cpu_attention) attention over the paged cache.

Why: in a decode step of a small model these ops run ~10 times per layer on tensors of a few KB, and numpy
spends most of their time in per-call overhead and in one full pass over memory per elementwise op (numpy
attention for one query was ~15 array calls, 80 us per layer of SmolLM2); each kernel here is one call and
one pass. They are serial: the matmuls between them run on BLAS's thread pool, and a second pool woken for
a few microseconds of work costs more than it saves. Every kernel is checked against the float64 reference
through the backend op tests; blazr/backends/array_api.py stays the numpy path used without numba.
Measured in a decode step, not in isolation: between two weight matmuls every cache holds weights, so each
numpy call pays for its own interpreter and library state again (a 1 us warm RMSNorm costs ~10 us there);
one call per op is what counts, more than each kernel's inner loop (the SiLU product's scalar exp is no
faster than numpy's SIMD one warm, yet one call replaces six).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.backends.cpu_attention import (  # noqa: F401 (the backend's ops)
    NO_ALIBI,
    NO_SINKS,
    attention_decode,
    attention_decode_biased,
    attention_prefill,
)
from blazr.backends.cpu_math import erfc_pos, exp_neg, tanh
from blazr.backends.half_bits import to_cache


@njit(cache=True, fastmath=True, nogil=True)
def rms_norm(x, w, eps, out):
    """out (T, D) = x (T, D) / sqrt(mean(x^2) + eps) * w (D,); the sum of squares in float64."""
    t_len, d = x.shape
    for t in range(t_len):
        acc = 0.0
        for i in range(d):
            v = np.float64(x[t, i])
            acc += v * v
        r = np.float32(1.0 / math.sqrt(acc / d + eps))
        for i in range(d):
            out[t, i] = x[t, i] * r * w[i]


@njit(cache=True, fastmath=True, nogil=True)
def rope(x, cos, sin, neox, rot, out):
    """out (T, H, Dh) = x (T, H, Dh) with its first `rot` features of each head rotated by the angles whose
    cos/sin are (T, rot/2); neox pairs feature i with i + rot/2, interleaved pairs 2i with 2i + 1."""
    t_len, heads, dh = x.shape
    half = rot // 2
    for t in range(t_len):
        c, s = cos[t], sin[t]  # (rot/2,)
        for h in range(heads):
            xi, oi = x[t, h], out[t, h]  # (Dh,)
            if neox:
                for i in range(half):
                    x1, x2 = xi[i], xi[i + half]
                    oi[i] = x1 * c[i] - x2 * s[i]
                    oi[i + half] = x2 * c[i] + x1 * s[i]
            else:
                for i in range(half):
                    x1, x2 = xi[2 * i], xi[2 * i + 1]
                    oi[2 * i] = x1 * c[i] - x2 * s[i]
                    oi[2 * i + 1] = x2 * c[i] + x1 * s[i]
            for i in range(rot, dh):
                oi[i] = xi[i]


@njit(cache=True, nogil=True)
def kv_write(k_cache, v_cache, k, v, slots):
    """k_cache[slots[t]] = k[t] and v_cache[slots[t]] = v[t]; caches (S, Hkv, Dh), k/v (T, Hkv, Dh). A float16
    cache comes as its uint16 bits with float32 k and v, rounded here as to_half does (half_bits.to_cache)."""
    n_slots = k_cache.shape[0]
    if k.shape[1:] != k_cache.shape[1:] or v.shape[1:] != v_cache.shape[1:] or k.shape[0] < slots.shape[0]:
        raise ValueError("kv_write: the rows' shapes differ from the KV cache's")
    for t in range(slots.shape[0]):
        s = slots[t]
        if s < 0 or s >= n_slots:
            raise IndexError("kv_write: a slot lies outside the KV cache")
        _put_rows(k_cache[s], k[t])
        _put_rows(v_cache[s], v[t])


@njit(inline="always")
def _put_rows(dst, src):
    """dst (Hkv, Dh) = src as the cache stores it (not a slice copy: blazr.numba_copy)."""
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = to_cache(dst, src[i, j])


@njit(cache=True, fastmath=True, nogil=True)
def silu_mul(gate, up, out):
    """out (T, F) = silu(gate) * up, silu(g) = g sigmoid(g)."""
    for t in range(gate.shape[0]):
        _silu_mul_row(gate[t], up[t], out[t])


@njit(parallel=True, cache=True, nogil=True)
def silu_mul_parallel(gate, up, out):
    """silu_mul with the rows shared out on numba's pool: for prompts whose matmuls already run there (the
    serial kernel was 6-8% of a 128-token prefill of the 0.5B and 1B shapes)."""
    for t in prange(gate.shape[0]):
        _silu_mul_row(gate[t], up[t], out[t])


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _silu_mul_row(g_row, u_row, o_row):
    """o_row (F,) = silu(g_row) * u_row, vectorised (_silu); error_model="numpy" (see act)."""
    for i in range(g_row.size):
        o_row[i] = _silu(g_row[i]) * u_row[i]


# act / glu kinds other than the SiLU product, numbered as blazr.backends.base.ACTIVATIONS
GELU, GELU_TANH, RELU, TANH, SIGMOID, EXP, SOFTPLUS, LEAKY_RELU, SIN = 1, 2, 3, 4, 5, 6, 7, 8, 9
GLU_SLOPE = np.float32(0.01)  # glu's leaky_relu slope (the contract's default)


# Activations in float32 arithmetic that vectorises (blazr.backends.cpu_math): GELU through libm's erf took 12 ns
# a value, a quarter of all-MiniLM's embedding time. GELU and GELU-tanh are written without 1 + erf / 1 + tanh,
# which cancel for negative inputs (1 + erf(-3) is 2e-5): GELU through erfc(|z|), GELU-tanh as x * sigmoid(2u).
# Max error against float64 over [-30, 30]: 3% of the op tolerance (1e-6 + 1e-5 |y|).


@njit(inline="always")
def _gelu(x):
    """x Phi(x) = x erfc(-x / sqrt 2) / 2, from erfc(|x| / sqrt 2) so that neither side cancels."""
    e = erfc_pos(abs(x) * np.float32(0.7071067811865476))
    return np.float32(0.5) * x * e if x < np.float32(0.0) else x * (np.float32(1.0) - np.float32(0.5) * e)


@njit(inline="always")
def _gelu_tanh(x):
    """0.5 x (1 + tanh u) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), from e^-2|u| <= 1."""
    u = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
    e = exp_neg(np.float32(-2.0) * abs(u))
    return x * (e / (np.float32(1.0) + e) if u < np.float32(0.0) else np.float32(1.0) / (np.float32(1.0) + e))


@njit(inline="always")
def _silu(g):
    """g sigmoid(g) from e^-|g| <= 1 (the table exp: libm's expf kept this loop scalar at 2.5 ns a value)."""
    e = exp_neg(-abs(g))
    return g * (e / (np.float32(1.0) + e) if g < np.float32(0.0) else np.float32(1.0) / (np.float32(1.0) + e))


@njit(inline="always")
def _sigmoid(x):
    """1 / (1 + e^-x) from e^-|x| <= 1: e^x / (1 + e^x) below 0, so that nothing overflows."""
    e = exp_neg(-abs(x))
    return (e if x < np.float32(0.0) else np.float32(1.0)) / (np.float32(1.0) + e)


@njit(inline="always")
def _act_row(x_row, kind, slope, o_row):
    """o_row (F,) = act(x_row (F,)): one vectorised loop per kind (the kind is tested once, outside it);
    slope: leaky_relu's negative slope (float32)."""
    n = x_row.size
    if kind == GELU:
        for i in range(n):
            o_row[i] = _gelu(x_row[i])
    elif kind == GELU_TANH:
        for i in range(n):
            o_row[i] = _gelu_tanh(x_row[i])
    elif kind == RELU:
        for i in range(n):
            o_row[i] = max(x_row[i], np.float32(0.0))
    elif kind == TANH:
        for i in range(n):
            o_row[i] = tanh(x_row[i])
    elif kind == SIGMOID:
        for i in range(n):
            o_row[i] = _sigmoid(x_row[i])
    elif kind == EXP:  # libm's expf: exact to an ulp over the whole range, inf past it
        for i in range(n):
            o_row[i] = math.exp(x_row[i])
    elif kind == SOFTPLUS:  # log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
        for i in range(n):
            v = x_row[i]
            o_row[i] = max(v, np.float32(0.0)) + math.log1p(exp_neg(-abs(v)))
    elif kind == LEAKY_RELU:
        for i in range(n):
            v = x_row[i]
            o_row[i] = v if v >= np.float32(0.0) else slope * v
    elif kind == SIN:
        for i in range(n):
            o_row[i] = math.sin(x_row[i])
    else:  # SiLU
        for i in range(n):
            o_row[i] = _silu(x_row[i])


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def act(x, kind, slope, out):
    """out (T, F) = act(x (T, F)) of the ACTIVATIONS kind `kind` (slope: leaky_relu's). Serial: encoders call
    it between OpenBLAS sgemms, whose spinning threads a numba parallel region would fight. error_model="numpy":
    with numba's default (python) every division checks for zero, and the check keeps the loop scalar
    (measured 3 ns a GELU against 0.2 ns vectorised)."""
    for t in range(x.shape[0]):
        _act_row(x[t], kind, slope, out[t])


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def glu(gate, up, kind, out):
    """out (T, F) = act(gate) * up: GeGLU (Gemma's GELU-tanh) and the other gated kinds but SiLU's."""
    for t in range(gate.shape[0]):
        _act_row(gate[t], kind, GLU_SLOPE, out[t])
        for i in range(gate.shape[1]):
            out[t, i] *= up[t, i]


@njit(cache=True, fastmath=True, nogil=True)
def layer_norm(x, w, b, eps, out):
    """out (T, D) = (x - mean) / sqrt(var + eps) * w (+ b when b holds D values; an empty b: no bias), the
    mean and variance in float64."""
    t_len, d = x.shape
    has_bias = b.shape[0] == d
    for t in range(t_len):
        total = 0.0
        for i in range(d):
            total += np.float64(x[t, i])
        mean = total / d
        acc = 0.0
        for i in range(d):
            v = np.float64(x[t, i]) - mean
            acc += v * v
        r = 1.0 / math.sqrt(acc / d + eps)
        for i in range(d):
            y = np.float32((np.float64(x[t, i]) - mean) * r) * w[i]
            out[t, i] = y + b[i] if has_bias else y


@njit(cache=True, fastmath=True, nogil=True)
def _dense_span(x, w, out, start, stop):
    for r in range(start, stop):
        row = w[r]  # (K,)
        for t in range(x.shape[0]):
            xt = x[t]  # (K,)
            acc = np.float32(0.0)
            for i in range(row.size):
                acc += row[i] * xt[i]
            out[t, r] = acc


@njit(cache=True, nogil=True)
def dense_matmul_serial(x, w, out):
    """out (T, N) = x (T, K) @ w (N, K).T on the calling thread (small products: see Backend.matmul)."""
    _dense_span(x, w, out, 0, w.shape[0])


@njit(parallel=True, cache=True, nogil=True)
def dense_matmul(x, w, out, rows_per_task):
    """out (T, N) = x (T, K) @ w (N, K).T for a few tokens, on numba's thread pool.

    Only for models whose other weights run in numba's packed kernels: handing one matmul a step to
    OpenBLAS's pool while numba's is awake made both spin against each other (a dense F32 LM head behind
    Q4_0 layers took decode from 39 to 9 tok/s); on its own OpenBLAS's gemv is the faster one."""
    n = w.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        _dense_span(x, w, out, task * rows_per_task, min(n, (task + 1) * rows_per_task))
