"""numba attention without a KV cache for the CPU backend (Backend.attention_dense): B sequences packed back
to back, each query seeing only keys of its own sequence (encoders, cross-attention, ModernBERT's local
window).

Why a kernel of its own: numpy's version loops over the sequences in Python, a dozen array calls each, so an
embedding batch of 256 short sequences spends more in calls than in arithmetic; and it runs serially.

Work split: one prange task per (chunk of Q_TILE queries of one sequence, query head). A task walks the keys
its queries see in tiles of K_TILE with an online softmax (running max m, sum l, rescaled acc), so any key
count fits in fixed scratch; encoder lengths (<= K_TILE) take one pass of full rows. Per key tile, read from
memory once per task, then used by blocks of _SUB queries:
  1. the keys are copied transposed into kt (Dk, n): a score row is sum_d q[d] * kt[d, :], an axpy over
     contiguous keys that vectorises with no horizontal sums (a dot product over Dk = 32 per key would end in
     a cross-lane reduction per key);
  2. exp is a polynomial the loop vectorises (_exp_row): numba without SVML calls libm's scalar expf, ~6 ns
     a score, more than the 4 * Dk flops each score takes otherwise;
  3. the values are copied transposed into vt (Dv, n) and acc += P @ vt.T runs as dot products over the keys
     with 2 x 4 (query, feature) accumulators in registers: 6 loads per 8 FMAs, where an axpy per key into acc
     rows (the paged kernel's order) loads and stores acc each time, at a fifth of the speed (measured).
Every hot loop indexes a view from 0 (s[j] of s = row[a:e], never row[a + j]): numba wraps negative indices,
and an index of unknown sign keeps that test in the loop and the loop scalar; causal and windowed attention
ran 3-4x slower per key before (measured).

Layouts as in Backend.attention_dense: q (Tq, H, Dk), k (Tk, Hkv, Dk), v (Tk, Hkv, Dv), all C-contiguous
(the backend copies views), q_lens / kv_lens (B,) int32, out (Tq, H, Dv).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import TaskByAddress, call_address

Q_TILE = 128  # queries per task: each key and value is read and transposed once per this many queries
_SUB = 16  # queries per block of scores (SUB, KT): the block stays in L1 between softmax and P @ V
_PAD = 16  # key loops run over multiples of this, one 512-bit vector of f32: 5-10% faster (measured)
K_TILE = 256  # keys per online-softmax step: kt, vt and P (at Dh = 32) stay within L1 + L2
_NEG = np.float32(-3.0e38)  # "no score yet": finite, since fastmath lets LLVM assume no infinities
_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)  # ln 2 split in two (Cody-Waite): k * _LN2_HI is exact for |k| < 2^9
_LN2_LO = np.float32(-2.12194440e-4)
NO_REL = np.zeros((1, 1), dtype=np.float32)  # the rel argument when there is no relative position bias


@njit(inline="always")
def _exp_row(s, bits, k2):
    """s = exp(s) in place for s (n,) <= 0. bits (n,) int32 is the same memory as s (s = bits.view(float32));
    k2 (>= n,) int32 scratch. Cephes' expf: exp(x) = 2^k p(r), r = x - k ln 2 in [-ln2/2, ln2/2], p of
    degree 6 (relative error ~1e-7); 2^k is added to p's exponent bits in a second loop (numba has no bit
    cast of a scalar). Both loops vectorise. x is clamped to -87 so 2^k p stays a normal
    float: exp(-87) ~ 2e-38 weighs nothing next to the row's largest weight, exp(0) = 1."""
    for j in range(s.shape[0]):
        x = max(s[j], np.float32(-87.0))
        kf = np.floor(x * _LOG2E + np.float32(0.5))
        r = x - kf * _LN2_HI - kf * _LN2_LO
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        s[j] = p * r * r + r + np.float32(1.0)
        k2[j] = np.int32(kf) << 23
    for j in range(s.shape[0]):
        bits[j] += k2[j]  # p * 2^k: k added to p's exponent field


@njit(inline="always")
def _key_range(pos, nk, causal, window):
    """(lo, hi): the keys lo..hi-1 the query at position pos sees; lo >= hi when none."""
    lo, hi = 0, nk
    if causal:
        hi = min(hi, pos + 1)
    if window > 0:
        lo = max(lo, pos - window + 1)
        hi = min(hi, pos + window)
    return lo, max(lo, hi)


def attention_dense(q, k, v, q_lens, kv_lens, scale, causal, window, q_tile, out, rel, has_rel):
    """out (Tq, H, Dv) = Backend.attention_dense(q, k, v, q_lens, kv_lens, scale, causal, window, rel_bias).
    q_tile: queries per task (Q_TILE; the benchmark varies it). rel (H, 2R + 1) f32: the relative position
    bias when has_rel, else ignored (NO_REL). Returns False, computing nothing, when the lengths do not fit
    the arrays (negative, wrong sums, H not a multiple of Hkv, rel not (H, odd)): the caller then takes the
    numpy path, which reports the error, where this kernel would read and write out of bounds."""
    task = _TILE_TASK.address(q, k, v, scale, causal, window, rel, has_rel, out)
    return _launch(task, q, k, v, q_lens, kv_lens, scale, causal, window, q_tile, out, rel, has_rel)


@njit(parallel=True, cache=True, fastmath=True, nogil=True)
def _launch(task_fn, q, k, v, q_lens, kv_lens, scale, causal, window, q_tile, out, rel, has_rel):
    """attention_dense's checks and parallel loop; task_fn: _tile's address for these argument types."""
    batch = q_lens.shape[0]
    tq, heads, dk = q.shape
    tk, hkv, dv = v.shape
    if kv_lens.shape[0] != batch or hkv == 0 or heads % hkv or k.shape[0] != tk or k.shape[1] != hkv:
        return False
    if k.shape[2] != dk or out.shape[0] != tq or out.shape[1] != heads or out.shape[2] != dv:
        return False
    n_tiles = sum_q = sum_k = 0
    for b in range(batch):
        if q_lens[b] < 0 or kv_lens[b] < 0:
            return False
        sum_q += q_lens[b]
        sum_k += kv_lens[b]
        n_tiles += (q_lens[b] + q_tile - 1) // q_tile
    if sum_q != tq or sum_k > tk:
        return False
    if has_rel and (rel.shape[0] != heads or rel.shape[1] % 2 == 0):
        return False
    g_len = heads // hkv
    # per query tile: its first query's position, first query row, query count, first key row, key count
    tiles = np.empty((n_tiles, 5), dtype=np.int64)  # (n_tiles, 5)
    t = q0 = k0 = 0
    for b in range(batch):
        nq, nk = q_lens[b], kv_lens[b]
        for i in range(0, nq, q_tile):
            tiles[t, 0], tiles[t, 1], tiles[t, 2] = nk - nq + i, q0 + i, min(q_tile, nq - i)
            tiles[t, 3], tiles[t, 4] = k0, nk
            t += 1
        q0 += nq
        k0 += nk
    for task in prange(n_tiles * heads):
        call_address(
            task_fn,
            (q, k, v, scale, causal, window, rel, has_rel, out, tiles, task // heads, task % heads, g_len),
        )
    return True


# A serial function of its own, called by address (blazr.numba_address): numba's parallel passes then see one
# call in the prange body, and the parallel loop does not compile its code again (attention_dense compiled in
# 23.2 s with the body inlined, 12.6 s as a called function; see cpu_attention.attention_prefill).
@njit(cache=True, fastmath=True, nogil=True)
def _tile(q, k, v, scale, causal, window, rel_all, has_rel, out, tiles, t, h, g_len):
    """Query head h (KV head h // g_len) of the query rows tile[1] .. tile[1] + tile[2] - 1 (positions
    tile[0] ..), against the tile[4] keys from row tile[3], tile = tiles[t]. Key tiles go in the outer loop and
    blocks of _SUB queries in the inner one, so each key and value is read from memory and transposed once per
    task, not per block. rel_all (H, 2R + 1): the relative position bias when has_rel."""
    tile, kh = tiles[t], h // g_len
    rel = rel_all[h if has_rel else 0]  # (2R + 1,) head h's bias
    first_pos, row0, n_rows, key0, nk = tile[0], tile[1], tile[2], tile[3], tile[4]
    dk, dv = q.shape[2], v.shape[2]
    # each query's keys, worked out once: the loops below then take no mask flags
    ranges = np.empty((n_rows, 2), dtype=np.int64)  # (QC, 2) first key, one past the last
    for i in range(n_rows):
        ranges[i, 0], ranges[i, 1] = _key_range(first_pos + i, nk, causal, window)
    lo_all, hi_all = ranges[0, 0], ranges[n_rows - 1, 1]  # ranges only move right
    width = _padded(max(1, min(K_TILE, hi_all - lo_all)))  # a short sequence gets scratch its size
    qs = np.empty((n_rows, dk), dtype=np.float32)  # (QC, Dk) queries times scale: no multiply per score
    acc = np.zeros((n_rows, dv), dtype=np.float32)  # (QC, Dv) unnormalised outputs
    m = np.full(n_rows, _NEG, dtype=np.float32)  # (QC,) running max score
    lsum = np.zeros(n_rows, dtype=np.float32)  # (QC,) running sum of exp(score - m)
    kt = np.empty((dk, width), dtype=np.float32)  # (Dk, KT) the key tile, transposed
    vt = np.empty((dv, width), dtype=np.float32)  # (Dv, KT) the value tile, transposed
    bits = np.empty((_SUB, width), dtype=np.int32)  # (SUB, KT) one block's scores then weights, as exp's bits
    p = bits.view(np.float32)  # (SUB, KT) the same memory as float32
    k2 = np.empty(width, dtype=np.int32)  # (KT,) exp's exponent scratch
    for i in range(n_rows):
        for d in range(dk):
            qs[i, d] = q[row0 + i, h, d] * scale
    for c0 in range(lo_all, hi_all, K_TILE):
        n = min(hi_all, c0 + K_TILE) - c0
        for j in range(n):
            key, val = k[key0 + c0 + j, kh], v[key0 + c0 + j, kh]  # (Dk,), (Dv,)
            for d in range(dk):
                kt[d, j] = key[d]
            for d in range(dv):
                vt[d, j] = val[d]
        for j in range(n, _padded(n)):  # padding keys: zeros, so no NaN of stale memory reaches P @ V
            for d in range(dk):
                kt[d, j] = np.float32(0.0)
            for d in range(dv):
                vt[d, j] = np.float32(0.0)
        for r0 in range(0, n_rows, _SUB):
            r1 = min(n_rows, r0 + _SUB)
            # the block's keys in this tile: from its first query's first key to its last query's last
            ba = max(ranges[r0, 0], c0) - c0
            be = min(ranges[r1 - 1, 1], c0 + n) - c0
            if ba >= be:
                continue
            # the block's loops run over whole _PAD columns (zero weights past its keys): no scalar remainder
            pa = ba // _PAD * _PAD
            pe = pa + _padded(be - pa)  # <= width: both are multiples of _PAD and be <= n
            for i in range(r0, r1):
                a = max(ranges[i, 0] - c0, ba)  # this row's keys within the block's: a..e-1
                e = max(ba, min(ranges[i, 1] - c0, be))
                if has_rel:  # the bias of key c0 + pa + j for the query at first_pos + i, in s[pa + j]
                    _rel_scores(pa, pe, p[i - r0], rel, c0 + pa - first_pos - i)
                _softmax_step(qs[i], kt, a, e, pa, pe, p[i - r0], bits[i - r0], k2, m, lsum, acc, i, has_rel)
            _weights_times_values(p, vt, pa, pe, acc[r0:r1])
    for i in range(n_rows):
        o = out[row0 + i, h]  # (Dv,)
        inv = np.float32(1.0) / lsum[i] if lsum[i] > 0 else np.float32(0.0)  # 0: a query that sees no key
        for d in range(dv):
            o[d] = acc[i, d] * inv


@njit(inline="always")
def _padded(n):
    """n rounded up to a multiple of _PAD."""
    return (n + _PAD - 1) // _PAD * _PAD


@njit(inline="always")
def _softmax_step(qrow, kt, a, e, pa, pe, s_row, bits_row, k2, m, lsum, acc, i, biased):
    """The online-softmax step of query i over keys a..e-1 of the tile kt (Dk, KT): s_row[pa:pe] = exp(score
    - new max) on a..e-1 and 0 elsewhere (pa <= a, e <= pe: the block's range, over which P @ V then runs),
    with m[i], lsum[i] and acc[i] (Dv,) updated. qrow (Dk,) is the scaled query; bits_row is s_row as int32.
    Every loop indexes a view from 0 (see the module docstring). biased: s_row[pa:pe] already holds a bias
    the scores are added to (else it is zeroed first)."""
    s = s_row[pa:pe]  # (n,) this block's columns
    n = pe - pa
    a, e = a - pa, e - pa  # from here on relative to pa
    if a >= e:  # no key of this tile: the row weighs 0 in the block's P @ V
        for j in range(n):
            s[j] = np.float32(0.0)
        return
    dk = qrow.shape[0]
    if not biased:
        for j in range(n):
            s[j] = np.float32(0.0)
    d4 = dk // 4 * 4
    for d in range(0, d4, 4):  # four features per pass over the score row: a quarter of its loads and stores
        q0, q1, q2, q3 = qrow[d], qrow[d + 1], qrow[d + 2], qrow[d + 3]
        k0, k1, k2_, k3 = kt[d, pa:pe], kt[d + 1, pa:pe], kt[d + 2, pa:pe], kt[d + 3, pa:pe]  # (n,) each
        for j in range(n):
            s[j] += q0 * k0[j] + q1 * k1[j] + q2 * k2_[j] + q3 * k3[j]
    for d in range(d4, dk):
        qd, kd = qrow[d], kt[d, pa:pe]  # kd (n,)
        for j in range(n):
            s[j] += qd * kd[j]
    mine = s[a:e]  # (e - a,) the scores of the keys this query sees
    top = m[i]
    for j in range(e - a):
        top = max(top, mine[j])
    for j in range(n):
        s[j] = min(s[j] - top, np.float32(0.0))  # keys outside a..e may score above top: zeroed below
    _exp_row(s, bits_row[pa:pe], k2)
    for j in range(a):
        s[j] = np.float32(0.0)  # keys outside the row's range weigh 0 in the shared P @ V
    for j in range(e, n):
        s[j] = np.float32(0.0)
    total = np.float32(0.0)
    for j in range(e - a):
        total += mine[j]
    correction = np.exp(m[i] - top)  # 0 on the first step (m is _NEG), 1 when the max did not move
    m[i] = top
    lsum[i] = lsum[i] * correction + total
    if correction != 1.0:
        for d in range(acc.shape[1]):
            acc[i, d] *= correction


@njit(inline="always")
def _rel_scores(pa, pe, s_row, rel, offset):
    """s_row[pa + j] = rel[clamp(offset + j, -R, R) + R] for j < pe - pa: the relative position bias of
    each key (offset: the first key's position minus the query's), which _softmax_step adds the scores to."""
    s = s_row[pa:pe]
    reach = (rel.shape[0] - 1) // 2
    for j in range(pe - pa):
        s[j] = rel[min(max(offset + j, -reach), reach) + reach]


@njit(inline="always")
def _weights_times_values(p, vt, a, e, acc):
    """acc (R, Dv) += p[:R, a:e] @ vt[:, a:e].T (p (SUB, KT), vt (Dv, KT)): dot products over the keys, two
    queries by four features at a time, so eight sums live in registers and each loaded weight or value feeds
    4 or 2 FMAs; the vectorised sums over the keys end in one horizontal add per output."""
    rows, dv = acc.shape
    r2, d4, n = rows // 2 * 2, dv // 4 * 4, e - a
    for i in range(0, rows, 2):
        pair = i < r2  # an odd last row is done as a pair with itself, its second half discarded
        i1 = i + 1 if pair else i
        w0, w1 = p[i, a:e], p[i1, a:e]  # (n,) each: views, indexed from 0 (see _softmax_step)
        for d in range(0, d4, 4):
            x0, x1, x2, x3 = vt[d, a:e], vt[d + 1, a:e], vt[d + 2, a:e], vt[d + 3, a:e]  # (n,) each
            a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = np.float32(0.0)
            for j in range(n):
                p0, p1 = w0[j], w1[j]
                a00 += p0 * x0[j]
                a01 += p0 * x1[j]
                a02 += p0 * x2[j]
                a03 += p0 * x3[j]
                a10 += p1 * x0[j]
                a11 += p1 * x1[j]
                a12 += p1 * x2[j]
                a13 += p1 * x3[j]
            acc[i, d] += a00
            acc[i, d + 1] += a01
            acc[i, d + 2] += a02
            acc[i, d + 3] += a03
            if pair:
                acc[i1, d] += a10
                acc[i1, d + 1] += a11
                acc[i1, d + 2] += a12
                acc[i1, d + 3] += a13
        for d in range(d4, dv):
            xd = vt[d, a:e]  # (n,)
            a0 = a1 = np.float32(0.0)
            for j in range(n):
                a0 += w0[j] * xd[j]
                a1 += w1[j] * xd[j]
            acc[i, d] += a0
            if pair:
                acc[i1, d] += a1


# _tile(q, k, v, scale, causal, window, rel, has_rel, out, tiles (n_tiles, 5) int64, t, h, g_len)
_TILE_TASK = TaskByAddress(
    _tile, lambda *given: (*given, types.Array(types.int64, 2, "C"), types.int64, types.int64, types.int64)
)
