"""Direct float32 convolutions on numba's thread pool, in the (channels, time) layout of the speech networks:
conv1d (stride 1, ungrouped, any dilation, with the fused pre-activation and residual of backends/base.py)
and conv_transpose1d (as a stride-1 convolution per output phase).

Why not im2col + sgemm (blazr/backends/array_api_conv.py, the numpy path): HiFi-GAN's last stages have 32-64
channels over 10^5 samples, a GEMM with M = 32-64 output channels and K = 100-450 (taps x channels) that
OpenBLAS ran at 40-55 GFLOP/s a core, after an im2col gather that writes every input column once per tap;
on two threads the gather, the activation and the sum stayed on one. The direct form keeps a tile of ROWS
output channels x VECS vectors of time in registers: each step broadcasts one weight against VECS
contiguous vectors of one input row at the tap's offset (no gather, no horizontal sums), and the tiles are
shared out over numba's threads.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.backends.cpu_ops import _act_row
from blazr.numba_address import TaskByAddress, call_address
from blazr.numba_copy import add1, copy1, copy2
from blazr.numba_threads import num_threads
from blazr.quant.cpu_target import FEATURES

# The register tile: ROWS output channels x VECS vectors of LANES samples. AVX-512 has 32 vector registers:
# 4 x 4 accumulators, 4 input vectors and a broadcast weight fit; AVX2 has 16 (of 8 lanes): 4 x 3 accumulators,
# 3 input vectors and the weight use all 16. Against 4 x 2 (measured, 2-core AMD EPYC Zen 1 class, Piper joe's 20
# sentences, runs alternating with onnxruntime's): 0.95-0.98x onnxruntime -> 1.01-1.03x; 3 x 4 spills (7.2 s
# against 5.5 s).
LANES = 16 if "avx512f" in FEATURES else 8
ROWS = 4
VECS = 4 if LANES == 16 else 3
TILE = LANES * VECS  # samples a tile computes
SLAB_FLOATS = 1 << 16  # a task's input columns (256 KB): in a core's L2 beside the weights
MAX_BLOCK = 4096  # output columns a task takes at most
TASKS_PER_THREAD = 4  # tasks per thread at least, when the sequence is short
_F32, _I64 = ir.FloatType(), ir.IntType(64)
NO_ACT = -1  # conv1d's act_kind for no pre-activation
_NO_BIAS, _NO_RESIDUAL = np.zeros(0, np.float32), np.zeros((0, 0), np.float32)  # absent terms: empty


def _ptr(context, builder, aryty, ary, row, col, ty):
    """ty* to element [row, col] of a C-contiguous 2-D float32 array."""
    arr = context.make_array(aryty)(context, builder, ary)
    stride = builder.extract_value(arr.strides, 0)
    base = builder.bitcast(arr.data, ir.IntType(8).as_pointer())
    offset = builder.add(builder.mul(row, stride), builder.mul(col, ir.Constant(_I64, 4)))
    return builder.bitcast(builder.gep(base, [offset]), ty.as_pointer())


@intrinsic
def _conv_tile(typingctx, w, x, out, co0, t0, o0, u0, c_in, kw, dil):
    """out[o0 + r, u0 : u0 + TILE] = sum over ci < c_in, j < kw of w[co0 + r, ci * kw + j] *
    x[ci, t0 + j * dil : ... + TILE], for r < ROWS (w (C, C_in * kw), x (C_in, W), out 2-D, all float32
    C-contiguous; every row and column read must exist)."""
    for name, arr in (("w", w), ("x", x), ("out", out)):
        if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.layout == "C"):
            raise TypeError(f"_conv_tile's {name} must be a C-contiguous 2-D array, got {arr}")

    def codegen(context, builder, sig, args):
        w_, x_, out_ = args[:3]
        aty = sig.args
        co0v, t0v, o0v, u0v, cin, taps, dilv = (
            context.cast(builder, v, aty[i], types.intp) for i, v in enumerate(args[3:], 3)
        )
        const = lambda v: ir.Constant(_I64, v)  # noqa: E731
        fvec = ir.VectorType(_F32, LANES)
        zero = ir.Constant(fvec, None)
        accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(VECS)] for _ in range(ROWS)]
        splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        with cgutils.for_range(builder, cin) as ci_loop:
            ci = ci_loop.index
            with cgutils.for_range(builder, taps) as tap_loop:
                j = tap_loop.index
                col = builder.add(t0v, builder.mul(j, dilv))
                xs = [
                    builder.load(
                        _ptr(context, builder, aty[1], x_, ci, builder.add(col, const(v * LANES)), fvec),
                        align=1,
                    )
                    for v in range(VECS)
                ]
                wcol = builder.add(builder.mul(ci, taps), j)
                for r in range(ROWS):
                    scalar = builder.load(
                        _ptr(context, builder, aty[0], w_, builder.add(co0v, const(r)), wcol, _F32)
                    )
                    one = builder.insert_element(ir.Constant(fvec, ir.Undefined), scalar, const(0))
                    wv = builder.shuffle_vector(one, ir.Constant(fvec, ir.Undefined), splat_mask)
                    for v in range(VECS):
                        cell = accs[r][v]
                        prod = builder.fmul(wv, xs[v], flags=["contract"])
                        builder.store(builder.fadd(builder.load(cell), prod, flags=["contract"]), cell)
        for r in range(ROWS):
            for v in range(VECS):
                target = _ptr(
                    context,
                    builder,
                    aty[2],
                    out_,
                    builder.add(o0v, const(r)),
                    builder.add(u0v, const(v * LANES)),
                    fvec,
                )
                builder.store(builder.load(accs[r][v]), target, align=1)
        return context.get_dummy_value()

    return types.none(w, x, out, co0, t0, o0, u0, c_in, kw, dil), codegen


# the activations as a function of their own, compiled once for every conv signature: inlined, their ten loops
# made each signature's task compile 2 s longer (10.7 s against 8.5 s, 2-core AMD EPYC, Zen 1 class)
_act_row_call = njit(cache=True, nogil=True, error_model="numpy")(_act_row.py_func)


@njit(inline="always")
def _fill_slab(x, first, kind, slope, slab):
    """slab[ci, c] = act(x[ci, first + c]) for every column c of slab (C_in, S), zero where first + c lies
    outside x (C_in, L): the padding. kind NO_ACT: x as it is, else an ACTIVATIONS index."""
    c_in, length = x.shape
    width = slab.shape[1]
    lo, hi = max(0, -first), min(width, length - first)  # slab columns that lie inside x
    for ci in range(c_in):
        if hi <= lo:
            slab[ci, :] = 0.0
            continue
        slab[ci, :lo] = 0.0
        if kind < 0:
            copy1(slab[ci, lo:hi], x[ci, first + lo : first + hi])
        else:
            _act_row_call(x[ci, first + lo : first + hi], kind, slope, slab[ci, lo:hi])
        slab[ci, hi:] = 0.0


def conv(x, w2, bias, residual, out, act, geometry):
    """out (C_out, L_out) = conv(act(x) (C_in, L) zero-padded by `pad`, w2 (>= ceil(C_out / ROWS) * ROWS,
    C_in * kw), stride 1, dilation dil) + bias (C_out,) + residual (C_out, L_out), each term only when its
    array is not empty; w2's rows past C_out are zero. act (kind, slope): NO_ACT or an ACTIVATIONS index.
    geometry (pad, kw, dil, block, groups, workers).

    Tasks: `block` output columns (a multiple of TILE) x one of `groups` shares of the channel tiles, dealt
    round-robin to `workers` (tasks are equal but the last). A task writes act(x) for its columns and their
    kw - 1 taps of reach into its worker's slab, which then stays in cache for every channel tile of the
    task: no padded copy of the whole input is made."""
    given = (x, w2, bias, residual, out, act, geometry)
    _launch(_CONV_TASK.address(*given), *given)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _launch(task_fn, x, w2, bias, residual, out, act, geometry):
    """conv's parallel loop over workers; task_fn: _conv_task's address for these argument types."""
    pad, kw, dil, block, groups, workers = geometry
    blocks = (out.shape[1] + block - 1) // block
    slabs = np.empty((workers, x.shape[0], block + dil * (kw - 1)), dtype=np.float32)  # act(x) columns
    for worker in prange(workers):
        for task in range(worker, blocks * groups, workers):
            call_address(task_fn, (x, w2, bias, residual, out, act, geometry, slabs, worker, task))


# called by address (blazr.numba_address): the parallel loop does not compile its code again (~3 s a signature)
@njit(cache=True, nogil=True, error_model="numpy")
def _conv_task(x, w2, bias, residual, out, act, geometry, slabs, worker, task):
    """One task of conv in worker's slab (slabs (workers, C_in, S)): output columns task // groups * block +
    [0, block), channel share task % groups."""
    slab = slabs[worker]  # (C_in, S)
    pad, kw, dil, block, groups, _ = geometry
    c_in = x.shape[0]
    c_out, l_out = out.shape
    row_tiles = (c_out + ROWS - 1) // ROWS
    per_group = (row_tiles + groups - 1) // groups
    t_start = (task // groups) * block
    t_stop = min(l_out, t_start + block)
    g = task % groups
    _fill_slab(x, t_start - pad, act[0], act[1], slab)
    for rt in range(g * per_group, min(row_tiles, (g + 1) * per_group)):
        co0 = rt * ROWS
        rows = min(ROWS, c_out - co0)
        for t0 in range(t_start, t_stop, TILE):
            cols = min(TILE, t_stop - t0)
            if rows == ROWS and cols == TILE:
                _conv_tile(w2, slab, out, co0, t0 - t_start, co0, t0, c_in, kw, dil)
            else:  # an edge tile: computed whole into a scratch tile, its part inside `out` copied
                tile = np.empty((ROWS, TILE), dtype=np.float32)  # (ROWS, TILE)
                _conv_tile(w2, slab, tile, co0, t0 - t_start, 0, 0, c_in, kw, dil)
                copy2(out[co0 : co0 + rows, t0 : t0 + cols], tile[:rows, :cols])
        for r in range(co0, co0 + rows):  # bias and residual while the tiles are in cache
            if bias.size:  # a loop: numba compiles `out[r, a:b] += v` as a slice copy (blazr.numba_copy)
                add = bias[r]
                for t in range(t_start, t_stop):
                    out[r, t] += add
            if residual.size:
                add1(out[r, t_start:t_stop], residual[r, t_start:t_stop])


# _conv_task(*conv's arguments, slabs (workers, C_in, S) float32, worker, task)
_CONV_TASK = TaskByAddress(
    _conv_task, lambda *given: (*given, types.Array(types.float32, 3, "C"), types.int64, types.int64)
)


@njit(parallel=True, cache=True, nogil=True)
def interleave_phases(phases, stride, pad, bias, out):
    """out[o, t] = phases[r * C_out + o, u] + bias[o] (bias empty: none) with t + pad = u * stride + r:
    conv_transpose1d's `stride` output phases (rows (r, o)) woven into one sequence, `pad` columns dropped
    each side. A phase row is read in order and written every stride-th column (no division per sample)."""
    c_out, l_out = out.shape
    for o in prange(c_out):
        add = bias[o] if bias.size else np.float32(0.0)
        for r in range(stride):
            src = phases[r * c_out + o]  # (U,)
            # the u whose column t = u * stride + r - pad lies in [0, l_out)
            first = max(0, (pad - r + stride - 1) // stride)
            last = min(src.size, (l_out - 1 + pad - r) // stride + 1)
            for u in range(first, last):
                out[o, u * stride + r - pad] = src[u] + add


def _rows_padded(w2: np.ndarray) -> np.ndarray:
    """w2 with zero rows up to a multiple of ROWS (the tiles of the last channels read whole rows)."""
    extra = -w2.shape[0] % ROWS
    return w2 if extra == 0 else np.concatenate([w2, np.zeros((extra, w2.shape[1]), np.float32)])


def conv1d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    pad: int,
    dilation: int,
    act_kind: int,
    slope: float,
    residual: np.ndarray | None,
) -> np.ndarray:
    """backends/base.py's conv1d for stride 1 and one group: x (C_in, L), w (C_out, C_in, Kw) float32 ->
    (C_out, L_out). act_kind NO_ACT or an index of blazr.backends.base.ACTIVATIONS, applied to x before
    the convolution (slope: leaky_relu's)."""
    c_in, length = x.shape
    c_out, _, kw = w.shape
    l_out = length + 2 * pad - dilation * (kw - 1)
    out = np.empty((c_out, max(l_out, 0)), dtype=np.float32)  # (C_out, L_out)
    if l_out <= 0:
        return out
    w2 = _rows_padded(np.ascontiguousarray(w).reshape(c_out, c_in * kw))  # (C_out -> ROWS, C_in * Kw)
    # columns a task takes: its slab (C_in x (block + reach) floats) within SLAB_FLOATS, so it stays in L2
    block = max(TILE, min(MAX_BLOCK, SLAB_FLOATS // c_in - dilation * (kw - 1)) // TILE * TILE)
    blocks = -(-l_out // block)
    row_tiles = -(-c_out // ROWS)
    # short sequences (a text encoder's frames) share the channel tiles out too, so every thread has work
    groups = min(row_tiles, max(1, -(-TASKS_PER_THREAD * num_threads() // blocks)))
    workers = min(num_threads(), blocks * groups)
    res = _NO_RESIDUAL if residual is None else np.ascontiguousarray(residual, dtype=np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    geometry = (pad, kw, dilation, block, groups, workers)
    conv(x, w2, _NO_BIAS if b is None else b, res, out, (act_kind, np.float32(slope)), geometry)
    return out


def conv_transpose1d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: int,
    pad: int,
    act_kind: int = NO_ACT,
    slope: float = 0.01,
) -> np.ndarray:
    """backends/base.py's conv_transpose1d for one group: act(x) (C_in, L) (act_kind as for conv1d), w (C_in,
    C_out, Kw) float32 -> (C_out, (L - 1) * stride - 2 * pad + Kw). Output column u * stride + r (before dropping `pad`) sums
    w[:, :, q * stride + r] . x[:, u - q] over q < m = ceil(Kw / stride): for each phase r a stride-1
    convolution of m taps over x padded by m - 1 on both sides, tap j = m - 1 - q."""
    c_in, length = x.shape
    _, c_out, kw = w.shape
    m = -(-kw // stride)
    wpad = np.zeros((c_in, c_out, m * stride), dtype=np.float32)
    wpad[:, :, :kw] = w
    # (stride, C_out, C_in, m): row (r, o), tap j = w[ci, o, (m - 1 - j) * stride + r]
    phase_w = wpad.reshape(c_in, c_out, m, stride)[:, :, ::-1, :].transpose(3, 1, 0, 2)
    phase_w = np.ascontiguousarray(phase_w).reshape(stride * c_out, c_in, m)
    phases = conv1d(x, phase_w, None, m - 1, 1, act_kind, slope, None)  # (stride * C_out, L + m - 1)
    l_out = (length - 1) * stride - 2 * pad + kw
    out = np.empty((c_out, l_out), dtype=np.float32)  # (C_out, L_out)
    interleave_phases(phases, stride, pad, _NO_BIAS if b is None else b, out)
    return out
