"""numba attention over the paged KV cache for the CPU backend: one query per sequence (decode, serial) and
many (prefill, parallel over sequence x KV head).

Why two: a decode step's attention is microseconds of work between matmuls that already ran on a thread
pool, so it stays serial. A prefill's attention is milliseconds and sits between the int8 GEMMs that run on
numba's pool (blazr.quant.cpu_int8_gemm); numpy's batched BLAS matmuls there woke OpenBLAS's pool, whose
spinning threads then took the cores from numba's next GEMM (1B shape, 128 tokens: prefill 2.2 s against
1.4 s with OpenBLAS at one thread). So a prefill whose matmuls run on numba's pool attends on it too.

Both share `_attend`: the G = H / Hkv queries of one KV head against a run of keys, each key row loaded once
per pass and dotted with all G queries. Layouts as in Backend.attention: q (T, H, Dh); caches (S, Hkv, Dh)
with position p of sequence b in slot tables[b, p // block_size] * block_size + p % block_size.

Caches are float32, or float16 passed as their uint16 bits (numba has no float16 type on the CPU): `widen`
turns each loaded element into float32 (blazr.backends.half_bits), so one source serves both.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.backends.cpu_attention_dots import dot_row, dot_rows4
from blazr.backends.half_bits import widen
from blazr.numba_address import TaskByAddress, call_address
from blazr.numba_copy import copy1

NO_ALIBI = np.empty(0, dtype=np.float32)  # (0,) the kernels' "no ALiBi" slopes
NO_SINKS = np.empty(0, dtype=np.float32)  # (0,) the kernels' "no attention sinks"
# fast-math without `reassoc` (nor `arcp`, `afn`) for every kernel `_attend` is compiled into: with it, LLVM
# may sum the same source in another order in each of them (blazr.backends.cpu_attention_dots), and a query
# must get the same bits from the serial and the parallel kernel
IN_ORDER = {"nnan", "ninf", "nsz", "contract"}


@njit(cache=True, fastmath=IN_ORDER, nogil=True)
def _attend(
    q,
    out,
    row,
    kh,
    col,
    k_cache,
    v_cache,
    slots,
    first,
    scale,
    softcap,
    alibi,
    sinks,
    qh,
    scores,
    acc,
    sink_weights,
):
    """out[row, h] = softmax(q[row, h] . keys * scale) @ values for the G query heads h of KV head kh, over
    the keys at `slots` (n,) in the caches' head column `col` (kh, or 0 for rows staged by _staged_rows), of
    positions first .. first + n - 1. alibi (H,) adds alibi[h] * position to each score before the soft-cap,
    or is empty (no ALiBi); sinks (H,) puts exp(sinks[h]) in head h's softmax sum (attention sinks), or is
    empty. qh (G, Dh), scores (G, >= n), acc (G, Dh) and sink_weights (G,) are scratch: the queries are copied
    to qh because q is usually a strided view (of the fused qkv rows), and the dot products only vectorise
    over rows numba knows to be contiguous."""
    g_len, dh = qh.shape
    for g in range(g_len):
        copy1(qh[g], q[row, kh * g_len + g])  # not a slice copy: blazr.numba_copy
    out_rows = out[row, kh * g_len : (kh + 1) * g_len]  # (G, Dh)
    n_keys = slots.size
    n4 = n_keys // 4 * 4
    for j in range(0, n4, 4):  # four keys per pass over each query: four dot products in flight
        k0, k1 = k_cache[slots[j], col], k_cache[slots[j + 1], col]  # (Dh,) each
        k2, k3 = k_cache[slots[j + 2], col], k_cache[slots[j + 3], col]
        for g in range(g_len):
            s0, s1, s2, s3 = dot_rows4(qh[g], k0, k1, k2, k3)
            scores[g, j], scores[g, j + 1], scores[g, j + 2], scores[g, j + 3] = s0, s1, s2, s3
    for j in range(n4, n_keys):
        key = k_cache[slots[j], col]  # (Dh,)
        for g in range(g_len):
            scores[g, j] = dot_row(qh[g], key)
    if alibi.size > 0:
        # ALiBi as scale * (q.k + slope / scale * position) = scale * q.k + slope * position (every
        # model's scale is > 0): a pass of its own, so the scaling loop below stays as it was, and a kernel
        # without ALiBi as fast
        for g in range(g_len):
            per_key = alibi[kh * g_len + g] / scale
            for j in range(n_keys):
                scores[g, j] += per_key * np.float32(first + j)
    for g in range(g_len):
        for j in range(n_keys):
            sc = scores[g, j] * scale
            scores[g, j] = softcap * np.tanh(sc / softcap) if softcap > 0 else sc
        top = scores[g, 0]
        for j in range(1, n_keys):
            top = max(top, scores[g, j])
        if sinks.size > 0:
            top = max(top, sinks[kh * g_len + g])
            sink_weights[g] = np.exp(sinks[kh * g_len + g] - top)
        else:
            sink_weights[g] = 0.0
        for j in range(n_keys):
            scores[g, j] = np.exp(scores[g, j] - top)
        acc[g] = 0.0
    for j in range(0, n4, 4):  # four keys per pass over acc: a quarter of the loads and stores of acc
        v0, v1 = v_cache[slots[j], col], v_cache[slots[j + 1], col]  # (Dh,) each
        v2, v3 = v_cache[slots[j + 2], col], v_cache[slots[j + 3], col]
        for g in range(g_len):
            w0, w1, w2, w3 = scores[g, j], scores[g, j + 1], scores[g, j + 2], scores[g, j + 3]
            a = acc[g]  # (Dh,)
            for i in range(dh):
                a[i] += w0 * widen(v0[i]) + w1 * widen(v1[i]) + w2 * widen(v2[i]) + w3 * widen(v3[i])
    for j in range(n4, n_keys):
        val = v_cache[slots[j], col]  # (Dh,)
        for g in range(g_len):
            wj = scores[g, j]
            a = acc[g]
            for i in range(dh):
                a[i] += wj * widen(val[i])
    for g in range(g_len):
        denom = sink_weights[g]
        for j in range(n_keys):
            denom += scores[g, j]
        o = out_rows[g]  # (Dh,)
        for i in range(dh):
            o[i] = acc[g, i] / denom


def _staged_rows(k_cache, v_cache, slots, kh):
    """(keys, values, rows, col) for `_attend` over the cache rows `slots` (L,) of KV head kh: the caches as
    they are for float32 (rows = slots, col = kh); for float16 bits, those rows widened into float32 arrays
    (L, 1, Dh) each (rows = 0..L-1, col = 0), so that a prompt's queries do not widen every key again."""
    raise NotImplementedError("_staged_rows runs inside numba kernels only")


@overload(_staged_rows)
def _staged_rows_numba(k_cache, v_cache, slots, kh):
    if k_cache.dtype != types.uint16:
        return lambda k_cache, v_cache, slots, kh: (k_cache, v_cache, slots, kh)

    def stage(k_cache, v_cache, slots, kh):
        n, dh = slots.size, k_cache.shape[2]
        keys = np.empty((n, 1, dh), dtype=np.float32)  # (L, 1, Dh)
        values = np.empty((n, 1, dh), dtype=np.float32)  # (L, 1, Dh)
        for j in range(n):
            # rows as 1-D views: indexing the 3-D arrays in the loop kept it scalar (13 us against 1.9 us
            # for 41 rows of 64, Zen 1)
            k_row, v_row = k_cache[slots[j], kh], v_cache[slots[j], kh]  # (Dh,) bits each
            k_out, v_out = keys[j, 0], values[j, 0]  # (Dh,)
            for i in range(dh):
                k_out[i] = widen(k_row[i])
                v_out[i] = widen(v_row[i])
        return keys, values, np.arange(n), 0

    return stage


@njit(inline="always")
def _sequence_slots(tables, b, start, stop, block_size, slots):
    """slots[p - start] = the cache row of position p of sequence b, start <= p < stop, without a division
    per position."""
    blk, off = start // block_size, start % block_size
    for p in range(stop - start):
        slots[p] = tables[b, blk] * block_size + off
        off += 1
        if off == block_size:
            blk, off = blk + 1, 0


@njit(inline="always")
def _decode(
    q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out
):
    """attention_decode's body; alibi (H,) float32 slopes and sinks (H,) float32 logits, each empty for none."""
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
    qh = np.empty((g_len, dh), dtype=np.float32)  # (G, Dh) one kv head's queries
    sink_w = np.empty(g_len, dtype=np.float32)  # (G,) each head's sink weight exp(sink - max), or 0
    slots = np.empty(max_ctx, dtype=np.int64)  # (L,) cache row of each position
    for b in range(batch):
        ctx = ctx_lens[b]
        lo = max(0, ctx - window) if window > 0 else 0
        _sequence_slots(tables, b, lo, ctx, block_size, slots)
        for kh in range(hkv):
            # float16 caches: the head's rows widened once, not once per query head of the group, and
            # attended by the very function a prompt's queries take (_prefill_task)
            k_rows, v_rows, rows_of, col = _staged_rows(k_cache, v_cache, slots[: ctx - lo], kh)
            _attend(
                q,
                out,
                b,
                kh,
                col,
                k_rows,
                v_rows,
                rows_of,
                lo,
                scale,
                softcap,
                alibi,
                sinks,
                qh,
                scores,
                acc,
                sink_w,
            )
    return True


@njit(cache=True, fastmath=IN_ORDER, nogil=True)
def attention_decode(q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, out):
    """One query per sequence: out (B, H, Dh) = softmax(q k^T * scale) v over the sequence's cached keys.
    Returns False, computing nothing, unless every q_lens[b] is 1 (the caller then takes another path).

    ctx_lens (B,) include the query's own position; window > 0 keeps the last `window` keys; softcap > 0
    squashes scores to softcap * tanh(s / softcap)."""
    # NO_ALIBI is a global, so numba freezes it as a constant and drops the ALiBi branch; and the call passes
    # no extra array, whose type check would add ~0.1 us to every decode layer's dispatch
    return _decode(
        q,
        k_cache,
        v_cache,
        tables,
        ctx_lens,
        q_lens,
        block_size,
        scale,
        window,
        softcap,
        NO_ALIBI,
        NO_SINKS,
        out,
    )


@njit(cache=True, fastmath=IN_ORDER, nogil=True)
def attention_decode_biased(
    q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out
):
    """attention_decode with ALiBi and/or attention sinks: alibi (H,) float32 slopes, alibi[h] * key position
    added to head h's scores before the soft-cap; sinks (H,) float32 logits in each head's softmax sum; either
    empty (NO_ALIBI, NO_SINKS) for none."""
    return _decode(
        q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out
    )


@njit(parallel=True, cache=True, fastmath=True, nogil=True)
def _launch_prefill(
    task_fn, q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out
):  # fmt: skip
    """attention_prefill's parallel loop; task_fn: _prefill_task's address for these argument types."""
    batch = ctx_lens.shape[0]
    hkv = k_cache.shape[1]
    first = np.zeros(batch + 1, dtype=np.int64)  # (B + 1,) row of each sequence's first query in q
    for b in range(batch):
        first[b + 1] = first[b] + q_lens[b]
    for task in prange(batch * hkv):
        b, kh = task // hkv, task % hkv
        call_address(
            task_fn,
            (q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out,
             first, b, kh),
        )  # fmt: skip


def attention_prefill(
    q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out
):  # fmt: skip
    """Any number of queries per sequence (Backend.attention's contract): out (T, H, Dh). The queries of
    sequence b are positions ctx_lens[b] - q_lens[b] .. ctx_lens[b] - 1, each seeing keys up to its own
    position (the last `window` of them when window > 0). alibi and sinks as in attention_decode_biased.
    Parallel over (sequence, KV head); a prefill's milliseconds make one more argument nothing.

    The loop body is a serial function of its own, called by address (blazr.numba_address): numba's parallel
    passes then see one call, and the parallel loop does not compile the body's code again. Compiling for a
    float32 and a float16 cache took 28.8 s with the body inlined, 16.9 s as a called function (with
    blazr.numba_copy's change too; 2-core AMD EPYC, Zen 1 class), on every cold start."""
    given = (q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out)  # fmt: skip
    _launch_prefill(_PREFILL_TASK.address(*given), *given)


@njit(cache=True, fastmath=IN_ORDER, nogil=True)
def _prefill_task(
    q, k_cache, v_cache, tables, ctx_lens, q_lens, block_size, scale, window, softcap, alibi, sinks, out, first,
    b, kh,
):  # fmt: skip
    """attention_prefill's queries of sequence b against KV head kh; first (B + 1,) each sequence's first
    query row in q."""
    g_len, dh = q.shape[1] // k_cache.shape[1], q.shape[2]
    ctx = ctx_lens[b]
    first_key = max(0, ctx - q_lens[b] + 1 - window) if window > 0 else 0  # the first query's first key
    slots = np.empty(ctx - first_key, dtype=np.int64)  # (L,) cache rows of positions first_key..ctx-1
    _sequence_slots(tables, b, first_key, ctx, block_size, slots)
    # float16 caches: the task's rows widened once, not once per query (3-D: head column 0)
    k_rows, v_rows, rows_of, col = _staged_rows(k_cache, v_cache, slots, kh)
    scores = np.empty((g_len, ctx), dtype=np.float32)  # (G, L)
    acc = np.empty((g_len, dh), dtype=np.float32)  # (G, Dh)
    qh = np.empty((g_len, dh), dtype=np.float32)  # (G, Dh)
    sink_w = np.empty(g_len, dtype=np.float32)  # (G,)
    for i in range(q_lens[b]):
        row, pos = first[b] + i, ctx - q_lens[b] + i
        lo = max(0, pos + 1 - window) if window > 0 else 0
        keys = rows_of[lo - first_key : pos + 1 - first_key]
        _attend(
            q,
            out,
            row,
            kh,
            col,
            k_rows,
            v_rows,
            keys,
            lo,
            scale,
            softcap,
            alibi,
            sinks,
            qh,
            scores,
            acc,
            sink_w,
        )


# _prefill_task(*attention_prefill's arguments, first (B + 1,) int64, b, kh)
_PREFILL_TASK = TaskByAddress(
    _prefill_task, lambda *given: (*given, types.Array(types.int64, 1, "C"), types.int64, types.int64)
)
