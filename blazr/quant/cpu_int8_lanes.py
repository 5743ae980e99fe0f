"""Decode matvec with int8 activations that rounds exactly as the prompt GEMM: batch-invariant int8 output.

Why: with int8 activations a prompt's tokens take the int8 GEMM tile (blazr.quant.cpu_int8_gemm) and a decode
step's few tokens took row dots (cpu_int8_dots) that sum the same exact integer dots in another float order.
A token then got other logits alone than inside a batch of 8 or more (continuous batching) or inside a whole
prompt (a prefix-cache hit computes only the tail), and greedy text flipped at near-ties. These kernels read
the packed rows as the row dots do (one pass, values unpacked in registers) but do the tile's float32
arithmetic cell by cell (blazr.quant.cpu_lane_simd; the 32-value formats' block pairs and the Q4_K / Q5_K / Q6_K
super-blocks by blazr.quant.cpu_lane_rows, accumulators in registers): a token's output is bit-identical on both paths, for any
batch. They run where the CPU has the int8 GEMM; elsewhere every token count takes the row dots, which are
then the only path.

The scales are the unpacker's (blazr.quant.cpu_unpack) computed the same way: ws per lane of 4 values and mins
per 16-value group, so `ws * dx` and `mins * xsum` are the very float32 numbers the tile multiplies.
`int8_lane_dot(tag, rows, xq, dx, xsum, acc, mins, out, r0)` writes out[t, r0:r0 + len(rows)] for every token t.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.quant.cpu_blocks import dispatch_by_format
from blazr.quant.cpu_int8_dots import _k_scale_min
from blazr.quant.cpu_lane_rows import ROW_LOOPS
from blazr.quant.cpu_lane_simd import (
    LANES,
    fma_i8,
    fma_i8_pair,
    fma_q2_k,
    fma_q3_k,
    fma_q4,
    fma_q4_k,
    fma_q4_pair,
    fma_q5,
    fma_q5_k,
    fma_q5_pair,
    fma_q6_k,
    lane_finish_rows,
    lane_zero,
)
from blazr.quant.cpu_simd import f16_at, prefetch
from blazr.quant.cpu_unpack import _q3_k_scale

# Every numba function here is named _lanes_*: with the row dots' and unpackers' names (_q4_q5, _q45_k, ...)
# reused, one test run compiled Q5_0 with Q4_1's inlined body (numba's inlining and on-disk caches know a
# function by its name); distinct names keep them apart.
AVAILABLE = LANES > 0
_SPAN = max(1, LANES // 8)  # 32-value blocks per tile step: block b writes lanes (b % _SPAN) * 8 ..
ROWS = 8  # rows a kernel call takes side by side (cpu_lane_rows: GROUP at a time)
# the block-pair and super-block loops, accumulators in registers (cpu_lane_rows; None where the CPU has no
# int8 GEMM tile)
_PAIRS_Q4_0, _PAIRS_Q4_1, _PAIRS_Q5_0, _PAIRS_Q5_1, _PAIRS_Q8_0, _SUPERS_Q4_K, _SUPERS_Q5_K, _SUPERS_Q6_K = (
    ROW_LOOPS.get(name) for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
)
PREFETCH_GROUPS = 1


@njit(inline="always")
def _lanes_finish(acc, mins, xsum, out, t, r0, nrows, offsets):
    """out[t, r0 + i] = row i's accumulator after the tile's offset loop (formats with offsets) and its
    reduction."""
    lane_finish_rows(acc, mins, xsum[t], xsum.shape[1] // LANES if offsets else 0, out[t, r0 : r0 + nrows])


@njit(inline="always")
def _lanes_prefetch(row, o, nbytes):
    """Prefetch the lines of bytes o .. o + nbytes of the row PREFETCH_GROUPS groups of ROWS rows later (a
    matrix's rows are consecutive; past its end the hint is harmless). The row dots' fixed distance ahead
    within the row fell short here: ROWS rows interleaved are ROWS streams."""
    ahead = PREFETCH_GROUPS * ROWS * row.size
    for line in range(0, nbytes, 64):
        prefetch(row, o + ahead + line)


@njit(inline="always")
def _lanes_start(acc, nrows):
    for i in range(nrows):
        lane_zero(acc[i])


# Each kernel takes ROWS rows at once, block by block: one row's accumulator lanes form a chain of dependent
# multiply-adds through memory, and several rows' chains side by side keep the core busy (one row at a time ran
# 1.4-1.6x slower than the row dots at one token).
# The offsets (mins) are stored in the block loop, where the scales are read anyway: a separate pass over
# the row cost about 40% at one token.

# ---- 32-value blocks ---------------------------------------------------------------------------------


@njit(inline="always")
def _lanes_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, block_bytes, five, has_min):
    """Q4_0 (ws d, mins 8 d), Q4_1 (d; -m), Q5_0 (d; 16 d), Q5_1 (d; -m): cpu_unpack._q4_q5's scales.
    Blocks go two at a time (a 64-value tile step); an odd last one alone."""
    qh_at = 4 if has_min else 2
    qs_at = qh_at + (4 if five else 0)
    nrows, nblocks = rows.shape[0], rows.shape[1] // block_bytes
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(0, nblocks - 1, 2):
            o0, o1 = b * block_bytes, (b + 1) * block_bytes
            for i in range(nrows):
                row = rows[i]  # (row_bytes,)
                _lanes_prefetch(row, o0, 2 * block_bytes)
                d0, d1 = f16_at(row, o0), f16_at(row, o1)
                _lanes_q4_q5_mins(row, mins[i], b, o0, d0, five, has_min)
                _lanes_q4_q5_mins(row, mins[i], b + 1, o1, d1, five, has_min)
                if five:
                    fma_q5_pair(row, o0 + qs_at, o0 + qh_at, o1 + qs_at, o1 + qh_at, x, 32 * b, acc[i],
                                d0, dx[t, b], d1, dx[t, b + 1])  # fmt: skip
                else:
                    fma_q4_pair(
                        row, o0 + qs_at, o1 + qs_at, x, 32 * b, acc[i], d0, dx[t, b], d1, dx[t, b + 1]
                    )
        _lanes_q4_q5_last(rows, x, dx, acc, mins, t, block_bytes, five, has_min)
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, True)


@njit(inline="always")
def _rows_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, pairs, block_bytes, five, has_min):
    """_lanes_q4_q5 with the block pairs by cpu_lane_rows' loop for the format (`pairs`), each
    row's lanes in registers."""
    for t in range(xq.shape[0]):
        pairs(rows, xq[t], dx[t], acc, mins, rows.shape[1] // block_bytes // 2)
        _lanes_q4_q5_last(rows, xq[t], dx, acc, mins, t, block_bytes, five, has_min)
        _lanes_finish(acc, mins, xsum, out, t, r0, rows.shape[0], True)


@njit(inline="always")
def _lanes_q4_q5_last(rows, x, dx, acc, mins, t, block_bytes, five, has_min):
    """An odd last block of the rows, alone (half a tile step), into their accumulators in memory."""
    nblocks = rows.shape[1] // block_bytes
    if nblocks % 2:
        qh_at = 4 if has_min else 2
        qs_at = qh_at + (4 if five else 0)
        b = nblocks - 1
        o = b * block_bytes
        for i in range(rows.shape[0]):
            row = rows[i]  # (row_bytes,)
            d = f16_at(row, o)
            _lanes_q4_q5_mins(row, mins[i], b, o, d, five, has_min)
            if five:
                fma_q5(row, o + qs_at, o + qh_at, x, 32 * b, acc[i], (b % _SPAN) * 8, d, d, dx[t, b])
            else:
                fma_q4(row, o + qs_at, x, 32 * b, acc[i], (b % _SPAN) * 8, d, d, dx[t, b])


@njit(inline="always")
def _lanes_q4_q5_mins(row, mins, b, o, d, five, has_min):
    mins[2 * b] = mins[2 * b + 1] = -f16_at(row, o + 2) if has_min else d * np.float32(16.0 if five else 8.0)


@njit(nogil=True)
def _lanes_q4_0(rows, xq, dx, xsum, acc, mins, out, r0):
    _lanes_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, 18, False, False)


@njit(nogil=True)
def _lanes_q4_1(rows, xq, dx, xsum, acc, mins, out, r0):
    _lanes_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, 20, False, True)


@njit(nogil=True)
def _lanes_q5_0(rows, xq, dx, xsum, acc, mins, out, r0):
    _lanes_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, 22, True, False)


@njit(nogil=True)
def _lanes_q5_1(rows, xq, dx, xsum, acc, mins, out, r0):
    _lanes_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, 24, True, True)


@njit(nogil=True)
def _rows_q4_0(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, _PAIRS_Q4_0, 18, False, False)


@njit(nogil=True)
def _rows_q4_1(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, _PAIRS_Q4_1, 20, False, True)


@njit(nogil=True)
def _rows_q5_0(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, _PAIRS_Q5_0, 22, True, False)


@njit(nogil=True)
def _rows_q5_1(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_q4_q5(rows, xq, dx, xsum, acc, mins, out, r0, _PAIRS_Q5_1, 24, True, True)


@njit(inline="always")
def _lanes_i4z_zero(row, o):
    return np.float32(np.int32(row[o + 2]) | (np.int32(row[o + 3]) << 8))


@njit(nogil=True)
def _lanes_i4z(rows, xq, dx, xsum, acc, mins, out, r0):
    """I4Z (d f16, z u16, Q4_0 nibbles): ws d, mins z d."""
    nrows, nblocks = rows.shape[0], rows.shape[1] // 20
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(0, nblocks - 1, 2):
            o0, o1 = 20 * b, 20 * b + 20
            for i in range(nrows):
                row = rows[i]  # (row_bytes,)
                _lanes_prefetch(row, o0, 40)
                d0, d1 = f16_at(row, o0), f16_at(row, o1)
                mins[i, 2 * b] = mins[i, 2 * b + 1] = _lanes_i4z_zero(row, o0) * d0
                mins[i, 2 * b + 2] = mins[i, 2 * b + 3] = _lanes_i4z_zero(row, o1) * d1
                fma_q4_pair(row, o0 + 4, o1 + 4, x, 32 * b, acc[i], d0, dx[t, b], d1, dx[t, b + 1])
        if nblocks % 2:
            b = nblocks - 1
            o = 20 * b
            for i in range(nrows):
                row = rows[i]  # (row_bytes,)
                d = f16_at(row, o)
                mins[i, 2 * b] = mins[i, 2 * b + 1] = _lanes_i4z_zero(row, o) * d
                fma_q4(row, o + 4, x, 32 * b, acc[i], (b % _SPAN) * 8, d, d, dx[t, b])
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, True)


@njit(nogil=True)
def _lanes_q8_0(rows, xq, dx, xsum, acc, mins, out, r0):
    """Q8_0: signed bytes, ws d, no offsets (the tile's signed variant)."""
    nrows, nblocks = rows.shape[0], rows.shape[1] // 34
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(0, nblocks - 1, 2):
            o0, o1 = 34 * b, 34 * b + 34
            for i in range(nrows):
                row = rows[i]  # (row_bytes,)
                _lanes_prefetch(row, o0, 68)
                fma_i8_pair(row, o0 + 2, o1 + 2, x, 32 * b, acc[i], f16_at(row, o0), dx[t, b], f16_at(row, o1),
                            dx[t, b + 1])  # fmt: skip
        _lanes_q8_0_last(rows, x, dx, acc, t)
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, False)


@njit(nogil=True)
def _rows_q8_0(rows, xq, dx, xsum, acc, mins, out, r0):
    """_lanes_q8_0 with the block pairs by cpu_lane_rows (accumulators in registers)."""
    for t in range(xq.shape[0]):
        _PAIRS_Q8_0(rows, xq[t], dx[t], acc, mins, rows.shape[1] // 34 // 2)
        _lanes_q8_0_last(rows, xq[t], dx, acc, t)
        _lanes_finish(acc, mins, xsum, out, t, r0, rows.shape[0], False)


@njit(inline="always")
def _lanes_q8_0_last(rows, x, dx, acc, t):
    """An odd last Q8_0 block, alone, into the accumulators in memory."""
    nblocks = rows.shape[1] // 34
    if nblocks % 2:
        b = nblocks - 1
        o = 34 * b
        for i in range(rows.shape[0]):
            d = f16_at(rows[i], o)
            fma_i8(rows[i], o + 2, x, 32 * b, acc[i], (b % _SPAN) * 8, d, d, dx[t, b])


# ---- 256-value K-quant super-blocks -------------------------------------------------------------------


@njit(inline="always")
def _lanes_q45_k_chunk(row, o, c, x, dx, acc, mins, t, b, d, dmin, five):
    """Chunk c of super-block b (at o): groups 2c and 2c + 1, ws d sc and mins dmin m each
    (cpu_unpack._q45_k)."""
    g = 8 * b + 2 * c  # 32-value block of its low group
    sc0, m0 = _k_scale_min(row, o, 2 * c)
    sc1, m1 = _k_scale_min(row, o, 2 * c + 1)
    ws0, ws1 = d * np.float32(sc0), d * np.float32(sc1)
    mins[2 * g] = mins[2 * g + 1] = dmin * np.float32(m0)
    mins[2 * g + 2] = mins[2 * g + 3] = dmin * np.float32(m1)
    if five:
        fma_q5_k(row, o + 48 + 32 * c, o + 16, c, x, 32 * g, acc, ws0, dx[t, g], ws1, dx[t, g + 1])
    else:
        fma_q4_k(row, o + 16 + 32 * c, x, 32 * g, acc, ws0, dx[t, g], ws1, dx[t, g + 1])


@njit(inline="always")
def _lanes_q45_k(rows, xq, dx, xsum, acc, mins, out, r0, five):
    """Q4_K / Q5_K: ws d sc, mins dmin m per 32 values; chunks spelled out (constant shifts, see
    cpu_int8_dots._q45_k)."""
    block_bytes = 176 if five else 144
    nrows, nblocks = rows.shape[0], rows.shape[1] // block_bytes
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(nblocks):
            o = b * block_bytes
            for i in range(nrows):
                row, a, m = rows[i], acc[i], mins[i]  # (row_bytes,), (LANES,), (G,)
                _lanes_prefetch(row, o, block_bytes)
                d, dmin = f16_at(row, o), f16_at(row, o + 2)
                _lanes_q45_k_chunk(row, o, 0, x, dx, a, m, t, b, d, dmin, five)
                _lanes_q45_k_chunk(row, o, 1, x, dx, a, m, t, b, d, dmin, five)
                _lanes_q45_k_chunk(row, o, 2, x, dx, a, m, t, b, d, dmin, five)
                _lanes_q45_k_chunk(row, o, 3, x, dx, a, m, t, b, d, dmin, five)
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, True)


@njit(inline="always")
def _rows_super(rows, xq, dx, xsum, acc, mins, out, r0, supers, block_bytes):
    """A K-quant's lanes: cpu_lane_rows' super-block loop (`supers`), lanes in registers."""
    for t in range(xq.shape[0]):
        supers(rows, xq[t], dx[t], acc, mins, rows.shape[1] // block_bytes)
        _lanes_finish(acc, mins, xsum, out, t, r0, rows.shape[0], True)


@njit(nogil=True)
def _rows_q4_k(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_super(rows, xq, dx, xsum, acc, mins, out, r0, _SUPERS_Q4_K, 144)


@njit(nogil=True)
def _rows_q5_k(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_super(rows, xq, dx, xsum, acc, mins, out, r0, _SUPERS_Q5_K, 176)


@njit(nogil=True)
def _rows_q6_k(rows, xq, dx, xsum, acc, mins, out, r0):
    _rows_super(rows, xq, dx, xsum, acc, mins, out, r0, _SUPERS_Q6_K, 210)


@njit(nogil=True)
def _lanes_q4_k(rows, xq, dx, xsum, acc, mins, out, r0):
    _lanes_q45_k(rows, xq, dx, xsum, acc, mins, out, r0, False)


@njit(nogil=True)
def _lanes_q5_k(rows, xq, dx, xsum, acc, mins, out, r0):
    _lanes_q45_k(rows, xq, dx, xsum, acc, mins, out, r0, True)


@njit(inline="always")
def _lanes_q2_k_field(row, o, h, f, x, dx, acc, mins, t, b, d, dmin):
    """Field f of half h: 32-value block 8b + 4h + f, groups 8h + 2f (+ 1), ws d (sc & 15), mins
    dmin (sc >> 4) (cpu_unpack._q2_k)."""
    g = 8 * b + 4 * h + f
    sc0, sc1 = np.int32(row[o + 8 * h + 2 * f]), np.int32(row[o + 8 * h + 2 * f + 1])
    ws0, ws1 = d * np.float32(sc0 & 15), d * np.float32(sc1 & 15)
    mins[2 * g] = dmin * np.float32(sc0 >> 4)
    mins[2 * g + 1] = dmin * np.float32(sc1 >> 4)
    fma_q2_k(row, o + 16 + 32 * h, 2 * f, x, 32 * g, acc, (g % _SPAN) * 8, ws0, ws1, dx[t, g])


@njit(nogil=True)
def _lanes_q2_k(rows, xq, dx, xsum, acc, mins, out, r0):
    """Q2_K: scales[16] (sc | m << 4), qs[64], d, dmin; fields spelled out (constant shifts)."""
    nrows, nblocks = rows.shape[0], rows.shape[1] // 84
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(nblocks):
            o = 84 * b
            for i in range(nrows):
                row, a, m = rows[i], acc[i], mins[i]  # (row_bytes,), (LANES,), (G,)
                _lanes_prefetch(row, o, 84)
                d, dmin = f16_at(row, o + 80), f16_at(row, o + 82)
                for h in range(2):
                    _lanes_q2_k_field(row, o, h, 0, x, dx, a, m, t, b, d, dmin)
                    _lanes_q2_k_field(row, o, h, 1, x, dx, a, m, t, b, d, dmin)
                    _lanes_q2_k_field(row, o, h, 2, x, dx, a, m, t, b, d, dmin)
                    _lanes_q2_k_field(row, o, h, 3, x, dx, a, m, t, b, d, dmin)
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, True)


@njit(inline="always")
def _lanes_q3_k_field(row, o, h, f, x, dx, acc, mins, t, b, d):
    """Field f of half h: 32-value block 8b + 4h + f, scales 8h + 2f (+ 1), ws d sc, mins 4 ws
    (values + 4, cpu_unpack._q3_k)."""
    g = 8 * b + 4 * h + f
    ws0 = d * np.float32(_q3_k_scale(row, o, 8 * h + 2 * f))
    ws1 = d * np.float32(_q3_k_scale(row, o, 8 * h + 2 * f + 1))
    mins[2 * g], mins[2 * g + 1] = np.float32(4.0) * ws0, np.float32(4.0) * ws1
    fma_q3_k(row, o + 32 + 32 * h, 2 * f, o, 4 * h + f, x, 32 * g, acc, (g % _SPAN) * 8, ws0, ws1, dx[t, g])


@njit(nogil=True)
def _lanes_q3_k(rows, xq, dx, xsum, acc, mins, out, r0):
    """Q3_K: hmask[32], qs[64], scales[12], d; fields spelled out (constant shifts)."""
    nrows, nblocks = rows.shape[0], rows.shape[1] // 110
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(nblocks):
            o = 110 * b
            for i in range(nrows):
                row, a, m = rows[i], acc[i], mins[i]  # (row_bytes,), (LANES,), (G,)
                _lanes_prefetch(row, o, 110)
                d = f16_at(row, o + 108)
                for h in range(2):
                    _lanes_q3_k_field(row, o, h, 0, x, dx, a, m, t, b, d)
                    _lanes_q3_k_field(row, o, h, 1, x, dx, a, m, t, b, d)
                    _lanes_q3_k_field(row, o, h, 2, x, dx, a, m, t, b, d)
                    _lanes_q3_k_field(row, o, h, 3, x, dx, a, m, t, b, d)
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, True)


@njit(inline="always")
def _lanes_q6_k_quarter(row, o, h, q, x, dx, acc, mins, t, b, d):
    """Quarter q of half h: 32-value block 8b + 4h + q, scales 8h + 2q (+ 1), ws d sc, mins 32 ws
    (values + 32, cpu_unpack._q6_k)."""
    g = 8 * b + 4 * h + q
    ws0 = d * np.float32((np.int32(row[o + 192 + 8 * h + 2 * q]) ^ 128) - 128)
    ws1 = d * np.float32((np.int32(row[o + 193 + 8 * h + 2 * q]) ^ 128) - 128)
    mins[2 * g], mins[2 * g + 1] = np.float32(32.0) * ws0, np.float32(32.0) * ws1
    ql_at, qh_at = o + 64 * h + 32 * (q & 1), o + 128 + 32 * h
    fma_q6_k(row, ql_at, qh_at, 4 * (q >> 1), 2 * q, x, 32 * g, acc, (g % _SPAN) * 8, ws0, ws1, dx[t, g])


@njit(nogil=True)
def _lanes_q6_k(rows, xq, dx, xsum, acc, mins, out, r0):
    """Q6_K: ql[128], qh[64], scales[16] int8, d; quarters spelled out (constant shifts)."""
    nrows, nblocks = rows.shape[0], rows.shape[1] // 210
    for t in range(xq.shape[0]):
        x = xq[t]  # (Kp,)
        _lanes_start(acc, nrows)
        for b in range(nblocks):
            o = 210 * b
            for i in range(nrows):
                row, a, m = rows[i], acc[i], mins[i]  # (row_bytes,), (LANES,), (G,)
                _lanes_prefetch(row, o, 210)
                d = f16_at(row, o + 208)
                for h in range(2):
                    _lanes_q6_k_quarter(row, o, h, 0, x, dx, a, m, t, b, d)
                    _lanes_q6_k_quarter(row, o, h, 1, x, dx, a, m, t, b, d)
                    _lanes_q6_k_quarter(row, o, h, 2, x, dx, a, m, t, b, d)
                    _lanes_q6_k_quarter(row, o, h, 3, x, dx, a, m, t, b, d)
        _lanes_finish(acc, mins, xsum, out, t, r0, nrows, True)


# ---- one kernel per format, picked at compile time (the parallel matvec: cpu_lane_matmul) ---------------

# type name -> fn(rows (R, row_bytes) uint8, xq (T, Kp) int8, dx (T, Kp/32) f32, xsum (T, G) f32,
#                 acc (ROWS, LANES) f32 scratch, mins (ROWS, G) f32 scratch (zero past the rows' groups),
#                 out (T, N), r0): out[:, r0:r0 + R] for R <= ROWS rows
LANE_DOTS: dict = {
    "Q4_0": _lanes_q4_0, "Q4_1": _lanes_q4_1, "Q5_0": _lanes_q5_0, "Q5_1": _lanes_q5_1, "Q8_0": _lanes_q8_0,
    "Q2_K": _lanes_q2_k, "Q3_K": _lanes_q3_k, "Q4_K": _lanes_q4_k, "Q5_K": _lanes_q5_k, "Q6_K": _lanes_q6_k,
    "I4Z": _lanes_i4z,
}  # fmt: skip
if ROW_LOOPS:  # the register loops in place of the memory lanes
    LANE_DOTS |= {
        "Q4_0": _rows_q4_0, "Q4_1": _rows_q4_1, "Q5_0": _rows_q5_0, "Q5_1": _rows_q5_1, "Q8_0": _rows_q8_0,
        "Q4_K": _rows_q4_k, "Q5_K": _rows_q5_k, "Q6_K": _rows_q6_k,
    }  # fmt: skip
FORMATS: frozenset[str] = frozenset(LANE_DOTS) if AVAILABLE else frozenset()

int8_lane_dot = dispatch_by_format(LANE_DOTS, "int8_lane_dot")
