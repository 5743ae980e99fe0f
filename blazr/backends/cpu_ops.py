"""numba kernels for the CPU backend's small per-token ops: RMSNorm, RoPE, KV-cache writes, the SiLU-gated
product and single-query (decode) attention over the paged cache.

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
    """k_cache[slots[t]] = k[t] and v_cache[slots[t]] = v[t]; caches (S, Hkv, Dh), k/v (T, Hkv, Dh)."""
    n_slots = k_cache.shape[0]
    for t in range(slots.shape[0]):
        s = slots[t]
        if s < 0 or s >= n_slots:
            raise IndexError("kv_write: a slot lies outside the KV cache")
        k_cache[s] = k[t]
        v_cache[s] = v[t]


@njit(cache=True, fastmath=True, nogil=True)
def silu_mul(gate, up, out):
    """out (T, F) = silu(gate) * up with silu(g) = g / (1 + exp(-g)), -g clamped at 88 (exp stays finite)."""
    t_len, f = gate.shape
    for t in range(t_len):
        g_row, u_row, o_row = gate[t], up[t], out[t]  # (F,) each
        for i in range(f):
            g = g_row[i]
            o_row[i] = g / (np.float32(1.0) + np.exp(min(-g, np.float32(88.0)))) * u_row[i]


@njit(cache=True, fastmath=True, nogil=True)
def attention_decode(q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, out):
    """One query per sequence: out (B, H, Dh) = softmax(q k^T * scale) v over the sequence's cached keys.
    Returns False, computing nothing, unless every q_lens[b] is 1 (the caller then takes the general path).

    q (B, H, Dh); caches (S, Hkv, Dh) with slot = tables[b, p // block_size] * block_size + p % block_size for
    position p; ctx_lens (B,) include the query's own position; window > 0 keeps the last `window` keys;
    softcap > 0 squashes scores to softcap * tanh(s / softcap). Each key row is loaded once per kv head and
    dotted with that head's G = H / Hkv queries.
    """
    batch, heads, dh = q.shape
    for b in range(batch):
        if q_lens[b] != 1:
            return False
    hkv = k_cache.shape[1]
    g_len = heads // hkv
    max_ctx = 0
    for b in range(batch):
        max_ctx = max(max_ctx, ctx_lens[b])
    scores = np.empty((g_len, max_ctx), dtype=np.float32)  # (G, L) one kv head's scores, then weights
    acc = np.empty((g_len, dh), dtype=np.float32)  # (G, Dh)
    # (G, Dh) this kv head's queries, copied: q is usually a strided view (of the fused qkv rows), and the
    # dot products only vectorise over rows numba knows to be contiguous
    qh = np.empty((g_len, dh), dtype=np.float32)
    slots = np.empty(max_ctx, dtype=np.int64)  # (L,) cache row of each key, found without a division per key
    for b in range(batch):
        ctx = ctx_lens[b]
        lo = max(0, ctx - window) if window > 0 else 0
        n_keys = ctx - lo
        blk, off = lo // block_size, lo % block_size
        for j in range(n_keys):
            slots[j] = tables[b, blk] * block_size + off
            off += 1
            if off == block_size:
                blk, off = blk + 1, 0
        for kh in range(hkv):
            for g in range(g_len):
                qh[g] = q[b, kh * g_len + g]
            n4 = n_keys // 4 * 4
            for j in range(0, n4, 4):  # four keys per pass over each query: four dot products in flight
                k0, k1 = k_cache[slots[j], kh], k_cache[slots[j + 1], kh]  # (Dh,) each
                k2, k3 = k_cache[slots[j + 2], kh], k_cache[slots[j + 3], kh]
                for g in range(g_len):
                    qv = qh[g]  # (Dh,)
                    s0 = s1 = s2 = s3 = np.float32(0.0)
                    for i in range(dh):
                        s0 += qv[i] * k0[i]
                        s1 += qv[i] * k1[i]
                        s2 += qv[i] * k2[i]
                        s3 += qv[i] * k3[i]
                    scores[g, j], scores[g, j + 1], scores[g, j + 2], scores[g, j + 3] = s0, s1, s2, s3
            for j in range(n4, n_keys):
                key = k_cache[slots[j], kh]  # (Dh,)
                for g in range(g_len):
                    qv = qh[g]  # (Dh,)
                    s = np.float32(0.0)
                    for i in range(dh):
                        s += qv[i] * key[i]
                    scores[g, j] = s
            for g in range(g_len):
                for j in range(n_keys):
                    sc = scores[g, j] * scale
                    scores[g, j] = softcap * np.tanh(sc / softcap) if softcap > 0 else sc
            for g in range(g_len):
                top = scores[g, 0]
                for j in range(1, n_keys):
                    top = max(top, scores[g, j])
                for j in range(n_keys):
                    scores[g, j] = np.exp(scores[g, j] - top)
                acc[g] = 0.0
            # four keys per pass over acc: a quarter of the loads and stores of acc
            n4 = n_keys // 4 * 4
            for j in range(0, n4, 4):
                v0, v1 = v_cache[slots[j], kh], v_cache[slots[j + 1], kh]  # (Dh,) each
                v2, v3 = v_cache[slots[j + 2], kh], v_cache[slots[j + 3], kh]
                for g in range(g_len):
                    w0, w1, w2, w3 = scores[g, j], scores[g, j + 1], scores[g, j + 2], scores[g, j + 3]
                    a = acc[g]  # (Dh,)
                    for i in range(dh):
                        a[i] += w0 * v0[i] + w1 * v1[i] + w2 * v2[i] + w3 * v3[i]
            for j in range(n4, n_keys):
                val = v_cache[slots[j], kh]  # (Dh,)
                for g in range(g_len):
                    wj = scores[g, j]
                    a = acc[g]
                    for i in range(dh):
                        a[i] += wj * val[i]
            for g in range(g_len):
                denom = np.float32(0.0)
                for j in range(n_keys):
                    denom += scores[g, j]
                o = out[b, kh * g_len + g]  # (Dh,)
                for i in range(dh):
                    o[i] = acc[g, i] / denom
    return True


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


@njit(parallel=True, cache=True, nogil=True)
def dense_matmul(x, w, out, rows_per_task):
    """out (T, N) = x (T, K) @ w (N, K).T for a few tokens, on numba's thread pool.

    Only for models whose other weights run in numba's packed kernels: handing one matmul a step to
    OpenBLAS's pool while numba's is awake made both spin against each other (a dense F32 LM head behind
    Q4_0 layers took decode from 39 to 9 tok/s); on its own OpenBLAS's gemv is the faster one."""
    n = w.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        _dense_span(x, w, out, task * rows_per_task, min(n, (task + 1) * rows_per_task))
