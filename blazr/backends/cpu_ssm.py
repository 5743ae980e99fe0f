"""numba kernels for the CPU backend's state-space-model ops (Backend.causal_conv1d, Backend.ssm_scan): float32,
B sequences laid back to back, each updating its state slot in place.

causal_conv1d is serial: a decode step's convolution is a few thousand multiply-adds per sequence, and even a
4096-token prompt's (Mamba2 370M: 2304 channels, 4 taps) is milliseconds against the seconds its matmuls take.

ssm_scan is a task per (sequence, head), or per block of heads where they are small (Mamba 1's 16 states): the
heads' (P, N) state (32 KB at P = 64, N = 128) stays in L1/L2 while the task runs the sequence's rows, each row
a pass over it with N innermost (contiguous, vectorised; the sum over N is the one reduction fastmath
reorders). The serial and the parallel kernel run the same inlined tasks, whose split depends on the shapes
only, so a sequence's numbers do not depend on which kernel ran or on the other sequences of the batch. LLVM's
loops here proved fragile: variants that looked equivalent (the tasks in a function of their own, the decay
kind tested inside the loops, a vectorised exp) ran 2-6x slower in one kernel or both; the layout below was
measured (tests/test_ops_ssm.py checks the two kernels give the same bits). The parallel
one runs where the backend's matmuls already run on numba's pool (Backend._numba_pool; waking it between
OpenBLAS calls made both pools spin, see blazr.backends.cpu) and the work is large enough to pay for the
hand-off: a decode step of a 370M Mamba2 (H 32, P 64, N 128) is 262k state values, 1 MB read and written.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.backends.cpu_ops import GLU_SLOPE, _act_row
from blazr.numba_copy import copy1, copy2

NO_ACT = -1  # causal_conv1d's kind without an activation (else the index in base.ACTIVATIONS)
NO_BIAS = np.zeros(0, dtype=np.float32)  # (0,) causal_conv1d without a bias
STATE_BLOCK = 1 << 12  # state values (16 KB) of the heads one scan task runs together, if a head is smaller
ROW_FLOATS = 1 << 12  # values of x (and of y) a scan task copies at a time (see _scan_task)
PARALLEL_SCAN_WORK = 1 << 15  # state values x rows from which a scan takes numba's pool (when it is awake)


@njit(inline="always")
def _sequence_starts(t_len, n_slots, seq_slots, q_lens, fresh):
    """(B + 1,) int64 first row of each sequence; raises on a batch that does not fit x or the states."""
    batch = seq_slots.shape[0]
    if q_lens.shape[0] != batch or fresh.shape[0] != batch:
        raise ValueError("seq_slots, q_lens and fresh differ in length")
    starts = np.zeros(batch + 1, dtype=np.int64)
    for i in range(batch):
        if seq_slots[i] < 0 or seq_slots[i] >= n_slots:
            raise IndexError("a slot lies outside the state slots")
        if q_lens[i] < 0:
            raise ValueError("a sequence length is negative")
        starts[i + 1] = starts[i] + q_lens[i]
    if starts[batch] != t_len:
        raise ValueError("q_lens do not sum to the rows given")
    return starts


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def causal_conv1d(x, w, b, states, seq_slots, q_lens, fresh, kind, out):
    """out (T, C) = act(b + depthwise causal convolution) of x (T, C) with w (C, K), each sequence's window
    starting with its slot's K-1 rows of states (S, K-1, C) (zeros where fresh), which then take the window's
    last K-1 rows. b (C,) or empty (no bias); kind an ACTIVATIONS index or NO_ACT."""
    t_len, c_len = x.shape
    k = w.shape[1]
    starts = _sequence_starts(t_len, states.shape[0], seq_slots, q_lens, fresh)
    taps = np.empty((k, c_len), dtype=np.float32)  # (K, C): each tap's weights contiguous over channels
    for j in range(k):
        for c in range(c_len):
            taps[j, c] = w[c, j]
    has_bias = b.shape[0] == c_len
    for i in range(seq_slots.shape[0]):
        state = states[seq_slots[i]]  # (K-1, C)
        if fresh[i] != 0:
            state[:, :] = 0.0
        row0, n = starts[i], q_lens[i]
        for t in range(n):
            o = out[row0 + t]  # (C,)
            if has_bias:
                copy1(o, b)
            else:
                o[:] = 0.0
            for j in range(k):  # window row t + j: a state row, then the new rows
                src = state[t + j] if t + j < k - 1 else x[row0 + t + j - (k - 1)]
                tap = taps[j]
                for c in range(c_len):
                    o[c] += tap[c] * src[c]
            if kind != NO_ACT:
                _act_row(o, kind, GLU_SLOPE, o)
        for r in range(k - 1):  # the window's last K-1 rows; row n + r >= r is read before it is written
            if n + r >= k - 1:
                copy1(state[r], x[row0 + n + r - (k - 1)])
            elif n > 0:
                copy1(state[r], state[n + r])


@njit(inline="always")
def _step_per_state(state, a, h, dth, xt, bt, ct, d_h, decay, yt):
    """One row through head h's state (P, N) with Mamba 1's decay per state: state[p] = exp(dth a[h]) state[p]
    + dth xt[p] bt, elementwise over N, and yt[p] = state[p] . ct + d_h xt[p]; decay (N,) scratch."""
    p_len, n_len = state.shape
    # libm's exp, a call per value: with cpu_math's vectorising exp_neg (a table gather) here, LLVM compiled the
    # serial kernel's loops 4x slower than the parallel kernel's
    for n in range(n_len):
        decay[n] = math.exp(dth * a[h, n])
    for p in range(p_len):
        dx = dth * xt[p]
        sp = state[p]  # (N,)
        acc = np.float32(0.0)
        for n in range(n_len):
            v = decay[n] * sp[n] + dx * bt[n]
            sp[n] = v
            acc += v * ct[n]
        yt[p] = acc + d_h * xt[p]


@njit(inline="always")
def _step_per_head(state, a, h, dth, xt, bt, ct, d_h, decay, yt):
    """_step_per_state with Mamba2's one decay per head, exp(dth a[h, 0]); decay unused."""
    p_len, n_len = state.shape
    decay_h = np.float32(math.exp(dth * a[h, 0]))
    for p in range(p_len):
        dx = dth * xt[p]
        sp = state[p]  # (N,)
        acc = np.float32(0.0)
        for n in range(n_len):
            v = decay_h * sp[n] + dx * bt[n]
            sp[n] = v
            acc += v * ct[n]
        yt[p] = acc + d_h * xt[p]


@njit(inline="always")
def _scan_task(step, x, dt, a, b, c, d, states, seq_slots, q_lens, fresh, starts, task, hb, scratch, y):
    """Task `task` = sequence i * blocks + head block k: sequence i's rows through the states of heads
    k hb .. (k + 1) hb - 1 in its slot, y[t, h] written for each; step is one of the _step functions, chosen
    at compile time (no branch inside the loops; see the module docstring).
    scratch = decay (N,), xs and ys (rows, hb, P): x[t, heads] and y[t, heads] go through xs and ys a block of
    rows at a time, because the rows of one head lie H * P floats apart (8 KB at H = 32, P = 64), which the
    prefetchers do not follow and which keep landing in the L1 sets of the state; loaded in one pass, their
    misses overlap (the scan ran 1.5x faster)."""
    decay, xs, ys = scratch
    heads = x.shape[1]
    blocks = (heads + hb - 1) // hb
    i, k = task // blocks, task % blocks
    h0, h1 = k * hb, min(heads, (k + 1) * hb)
    per_group = heads // b.shape[1]
    slot = seq_slots[i]
    if fresh[i] != 0:
        states[slot, h0:h1] = 0.0
    stop = starts[i] + q_lens[i]
    for t0 in range(starts[i], stop, xs.shape[0]):
        t1 = min(stop, t0 + xs.shape[0])
        for t in range(t0, t1):
            copy2(xs[t - t0], x[t, h0:h1])
        for t in range(t0, t1):
            xr, yr = xs[t - t0], ys[t - t0]  # (hb, P) each
            for h in range(h0, h1):
                g = h // per_group
                step(states[slot, h], a, h, dt[t, h], xr[h - h0], b[t, g], c[t, g], d[h], decay, yr[h - h0])
        for t in range(t0, t1):
            copy2(y[t, h0:h1], ys[t - t0, : h1 - h0])


@njit(inline="always")
def _head_block(states):
    """Heads one task runs together: states of at most STATE_BLOCK values, at least one head."""
    return max(1, STATE_BLOCK // (states.shape[2] * states.shape[3]))


@njit(inline="always")
def _scratch(states, hb):
    """A task's scratch: decay (N,), xs and ys (rows, hb, P) of about ROW_FLOATS values each."""
    p_len, n_len = states.shape[2], states.shape[3]
    rows = max(1, ROW_FLOATS // (hb * p_len))
    shape = (rows, hb, p_len)
    return np.empty(n_len, np.float32), np.empty(shape, np.float32), np.empty(shape, np.float32)


# Compiled once for both scans, not inlined into each: numba's parallel passes then see one call in the
# prange body (ssm_scan_parallel compiled in 17 s with it inlined, beside ssm_scan_serial's 8 s).
@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _run_tasks(x, dt, a, b, c, d, states, seq_slots, q_lens, fresh, starts, first, stop, step_by, hb, y):
    """Tasks first, first + step_by, .. < stop, the decay kind chosen once, outside the loops."""
    scratch = _scratch(states, hb)
    if a.shape[1] != 1:
        for task in range(first, stop, step_by):
            _scan_task(
                _step_per_state,
                x,
                dt,
                a,
                b,
                c,
                d,
                states,
                seq_slots,
                q_lens,
                fresh,
                starts,
                task,
                hb,
                scratch,
                y,
            )
    else:
        for task in range(first, stop, step_by):
            _scan_task(
                _step_per_head,
                x,
                dt,
                a,
                b,
                c,
                d,
                states,
                seq_slots,
                q_lens,
                fresh,
                starts,
                task,
                hb,
                scratch,
                y,
            )


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def ssm_scan_serial(x, dt, a, b, c, d, states, seq_slots, q_lens, fresh, y):
    """y (T, H, P) = the selective scan (Backend.ssm_scan) of every (sequence, head block) in turn.
    x (T, H, P), dt (T, H), a (H, 1) or (H, N), b and c (T, G, N), d (H,), states (S, H, P, N) in place."""
    starts = _sequence_starts(x.shape[0], states.shape[0], seq_slots, q_lens, fresh)
    hb = _head_block(states)
    tasks = seq_slots.shape[0] * ((x.shape[1] + hb - 1) // hb)
    _run_tasks(x, dt, a, b, c, d, states, seq_slots, q_lens, fresh, starts, 0, tasks, 1, hb, y)


@njit(parallel=True, cache=True, fastmath=True, nogil=True, error_model="numpy")
def ssm_scan_parallel(x, dt, a, b, c, d, states, seq_slots, q_lens, fresh, y, chunks):
    """ssm_scan_serial with the (sequence, head block) tasks dealt out on numba's pool: chunk k takes tasks
    k, k + chunks, ..., so that every chunk holds heads of every sequence (a long prompt beside decode rows).
    chunks: a few per thread (numba.get_num_threads() is a dynamic global, which a cached kernel cannot read)."""
    starts = _sequence_starts(x.shape[0], states.shape[0], seq_slots, q_lens, fresh)
    hb = _head_block(states)
    tasks = seq_slots.shape[0] * ((x.shape[1] + hb - 1) // hb)
    chunks = max(1, min(tasks, chunks))
    for chunk in prange(chunks):
        _run_tasks(x, dt, a, b, c, d, states, seq_slots, q_lens, fresh, starts, chunk, tasks, chunks, hb, y)
