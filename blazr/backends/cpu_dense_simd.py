"""A register-blocked float32 GEMM tile as a numba intrinsic, for the short-sequence attention kernel
(blazr.backends.cpu_dense_short).

Why an intrinsic: numba code cannot hold SIMD vectors, so a small product written as loops either stores its
accumulators to memory every few multiply-adds (an axpy per row, with LLVM's runtime alias checks in front of
each short loop) or ends every output in a horizontal sum (dot products); on 16-128 long rows both ran at a
quarter of the FMA units or less (measured). Here ROWS x COLS vector accumulators live in registers over all
steps: each step loads COLS vectors of b and broadcasts ROWS scalars of a.

    tile(a, b, c, scl, r0, c0, steps, rows)   for r < ROWS, cc < COLS, r < rows:
        c[r0 + r, c0 + 16 cc : + 16] = scl[r0 + r] * sum_{k < steps} A(r0 + r, k) * b[k, c0 + 16 cc : + 16]
    A(r, k) = a[r, k] (tile_ab) or a[k, r] (tile_atb: a given transposed).
All arrays are 2-D float32 with contiguous rows (any row stride); the caller keeps every index in bounds.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16  # one 512-bit vector of float32 (two AVX ones on a CPU without AVX-512: LLVM splits it)
_I8, _I64, _F32 = ir.IntType(8), ir.IntType(64), ir.FloatType()


def _ptr(context, builder, aryty, ary, row, col):
    """float* to a[row, col] of a 2-D array with unit inner stride."""
    arr = context.make_array(aryty)(context, builder, ary)
    stride = builder.extract_value(arr.strides, 0)
    base = builder.bitcast(arr.data, _I8.as_pointer())
    byte = builder.add(builder.mul(row, stride), builder.mul(col, ir.Constant(_I64, 4)))
    return builder.bitcast(builder.gep(base, [byte]), _F32.as_pointer())


def _make_tile(rows_n: int, cols_n: int, a_transposed: bool):
    fvec = ir.VectorType(_F32, LANES)

    @intrinsic
    def tile(typingctx, a, b, c, scl, r0, c0, steps, rows):
        for name, arr, nd in (("a", a, 2), ("b", b, 2), ("c", c, 2), ("scl", scl, 1)):
            if not (isinstance(arr, types.Array) and arr.ndim == nd and arr.dtype == types.float32):
                raise TypeError(f"tile's {name} must be a {nd}-D float32 array, got {arr}")

        def codegen(context, builder, sig, args):
            a_, b_, c_, s_ = args[:4]
            aty = sig.args
            r0v, c0v, nsteps, nrows = (
                context.cast(builder, v, aty[i], types.intp) for i, v in enumerate(args[4:], 4)
            )
            const = lambda v: ir.Constant(_I64, v)  # noqa: E731
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(fvec, None)) for _ in range(cols_n)]
                    for _ in range(rows_n)]  # fmt: skip
            cols = [builder.add(c0v, const(LANES * cc)) for cc in range(cols_n)]
            rws = [builder.add(r0v, const(r)) for r in range(rows_n)]
            with cgutils.for_range(builder, nsteps) as loop:
                k = loop.index
                bs = [builder.load(builder.bitcast(_ptr(context, builder, aty[1], b_, k, col), fvec.as_pointer()),
                                   align=4) for col in cols]  # fmt: skip
                for r in range(rows_n):
                    at = (k, rws[r]) if a_transposed else (rws[r], k)
                    x = builder.load(_ptr(context, builder, aty[0], a_, *at))
                    xv = _splat(builder, x, fvec)
                    for cc in range(cols_n):
                        cell = accs[r][cc]
                        prod = builder.fmul(xv, bs[cc], flags=["contract"])
                        builder.store(builder.fadd(builder.load(cell), prod, flags=["contract"]), cell)
            sarr = context.make_array(aty[3])(context, builder, s_)
            for r in range(rows_n):
                with cgutils.if_likely(builder, builder.icmp_signed("<", const(r), nrows)):
                    sv = _splat(builder, builder.load(cgutils.get_item_pointer(context, builder, aty[3], sarr,
                                                                               [rws[r]])), fvec)  # fmt: skip
                    for cc in range(cols_n):
                        out = builder.fmul(builder.load(accs[r][cc]), sv)
                        ptr = _ptr(context, builder, aty[2], c_, rws[r], cols[cc])
                        builder.store(out, builder.bitcast(ptr, fvec.as_pointer()), align=4)
            return context.get_dummy_value()

        return types.none(a, b, c, scl, r0, c0, steps, rows), codegen

    return tile


def _splat(builder, x, fvec):
    undef = ir.Constant(fvec, ir.Undefined)
    one = builder.insert_element(undef, x, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(ir.IntType(32), fvec.count), None))


TILE_ROWS = 8
tile_ab = _make_tile(TILE_ROWS, 1, False)  # scores: 8 key rows x 16 queries
tile_atb1 = _make_tile(TILE_ROWS, 1, True)  # outputs: 8 queries x 16 features
tile_atb2 = _make_tile(TILE_ROWS, 2, True)  # outputs: 8 queries x 32 features
