"""Whole-row lane dots for the 32-value block formats, each row's accumulator in registers
(blazr.quant.cpu_int8_lanes).

Why: cpu_lane_simd's intrinsics take one block (or block pair) of one row a call, adding into the row's
accumulator lanes in memory: a load, the multiply-adds and a store per call, and the kernels interleaved 8 rows
that way. Here one intrinsic runs the block-pair loop over all the rows it is given in LLVM IR, GROUP rows side
by side, each row's lanes an SSA value LLVM keeps in registers, and a pair's scales come from one half
conversion. The float arithmetic is cpu_lane_simd's (the int8 GEMM tile's) step for step, so every output is
bit-identical to the tile's (tests/test_quant_int8_lanes.py). Q4_1, one thread, Zen 1 class EPYC: 6.0-7.2 ->
3.7-4.0 ns a block and row (llama.cpp's AVX2 vec_dot on the same machine: 3.2-3.4).

`pairs(rows (R, row_bytes) uint8, x (Kp,) int8, dx (Kp/32,) float32, acc (>= R, LANES) float32,
mins (>= R, G) float32, npairs)` sets acc[i] to row i's lanes over its first 2 * npairs blocks (the caller adds an
odd last block and finishes, as before) and writes mins[i, :4 npairs] for formats with offsets.
"""

from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from blazr.quant.cpu_lane_simd import LANES, _lane_dots
from blazr.quant.cpu_simd import _load, _nibbles, _splat, _vec, four_halves, prefetch_line

_F32, _I32, _I64, _I8 = ir.FloatType(), ir.IntType(32), ir.IntType(64), ir.IntType(8)
# rows a pass takes side by side, as independent accumulator chains (Q4_1 at 1, 2, 4: 5.2, 4.7, 4.0 ns a block;
# Q5's bit expansion needs more registers: at 4 it spilled, 3 measured 4.8-5.2 ns against 5.0-5.7)
GROUP = 4
# how many passes ahead the prefetches read (Gemma 3's 262144 x 640 Q8_0 head at 1, 2, 4: the same 12.9-13.3 ms)
PREFETCH_PASSES = 1


class BlockFormat(NamedTuple):
    block_bytes: int
    qs_at: int  # the block's value bytes (nibbles, or Q8_0's signed bytes)
    qh_at: int | None  # Q5's high bits
    offsets: str  # "-m" (the block's second half), "8d" / "16d" (Q4_0 / Q5_0), "" (Q8_0: none)
    signed: bool = False
    group: int = GROUP


FORMATS = {
    "Q4_0": BlockFormat(18, 2, None, "8d"),
    "Q4_1": BlockFormat(20, 4, None, "-m"),
    "Q5_0": BlockFormat(22, 6, 2, "16d", group=3),
    "Q5_1": BlockFormat(24, 8, 4, "-m", group=3),
    "Q8_0": BlockFormat(34, 2, None, "", signed=True),
}


def _values(builder, fmt: BlockFormat, block):
    """<32 x i8> weight values of the block at byte pointer `block` (cpu_simd's _q4_values / _q5_values)."""
    if fmt.signed:
        return _load(builder, builder.gep(block, [ir.Constant(_I64, fmt.qs_at)]), 32)
    values = _nibbles(builder, _load(builder, builder.gep(block, [ir.Constant(_I64, fmt.qs_at)]), 16))
    if fmt.qh_at is None:
        return values
    qh_ptr = builder.bitcast(builder.gep(block, [ir.Constant(_I64, fmt.qh_at)]), _I32.as_pointer())
    high = builder.zext(
        builder.bitcast(builder.load(qh_ptr, align=1), _vec(ir.IntType(1), 32)), _vec(_I8, 32)
    )
    return builder.or_(values, builder.shl(high, _splat(builder, 4, 32)))


def _splat_float(builder, value, n: int):
    one = builder.insert_element(ir.Constant(_vec(_F32, n), None), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(_vec(_I32, n), [0] * n))


def _pair_step(builder, fmt: BlockFormat, block0, xlo, xhi, dx0, dx1, mins_at, lanes):
    """One block pair of one row: its offsets stored at mins_at (4 floats), its products added to `lanes`
    (<8 x float>: the low block's, then the high one's, as the 8-lane tile's two steps); returns the lanes."""
    block1 = builder.gep(block0, [ir.Constant(_I64, fmt.block_bytes)])
    four = four_halves(builder, block0, block1)  # d0, (m0 or junk), d1, (m1 or junk)
    d0, d1 = (builder.extract_element(four, ir.Constant(_I32, i)) for i in (0, 2))
    if fmt.offsets:
        if fmt.offsets == "-m":
            per_group = builder.shuffle_vector(four, four, ir.Constant(_vec(_I32, 4), [1, 1, 3, 3]))
            per_group = builder.fneg(per_group)
        else:  # d times 8 or 16 (exact: a power of two), as cpu_int8_lanes' scalar product
            ds = builder.shuffle_vector(four, four, ir.Constant(_vec(_I32, 4), [0, 0, 2, 2]))
            per_group = builder.fmul(ds, _splat_float(builder, ir.Constant(_F32, float(fmt.offsets[:-1])), 4))
        builder.store(per_group, builder.bitcast(mins_at, per_group.type.as_pointer()), align=4)
    for block, xv, d, dx in ((block0, xlo, d0, dx0), (block1, xhi, d1, dx1)):
        dots = builder.sitofp(
            _lane_dots(builder, _values(builder, fmt, block), xv, fmt.signed), _vec(_F32, 8)
        )
        # cpu_lane_simd._lanes_fma's operations and flags: (ws dx), then one fused multiply-add
        scaled = builder.fmul(dots, _splat_float(builder, builder.fmul(d, dx), 8), flags=["contract"])
        lanes = builder.fadd(lanes, scaled, flags=["contract"])
    return lanes


def _rows_pass(builder, fmt: BlockFormat, rows_at, ahead, x, dx, acc_at, mins_at, npairs, count: int):
    """The pair loop over `count` rows side by side: rows_at(i), acc_at(i), mins_at(i) give row i's pointers;
    each pair's bytes `ahead` bytes on (the next pass's rows: a matrix's rows are consecutive) are prefetched, as
    the memory-lane kernels did (SmolLM2's Q8_0 LM head, streamed from memory, took 1.55x the time without)."""
    cells = [cgutils.alloca_once_value(builder, ir.Constant(_vec(_F32, 8), None)) for _ in range(count)]
    with cgutils.for_range(builder, npairs) as loop:
        p = loop.index
        xo = builder.mul(p, ir.Constant(_I64, 64))
        xlo = _load(builder, builder.gep(x, [xo]), 32)
        xhi = _load(builder, builder.gep(x, [builder.add(xo, ir.Constant(_I64, 32))]), 32)
        b0 = builder.mul(p, ir.Constant(_I64, 2))
        dx0 = builder.load(builder.gep(dx, [b0]))
        dx1 = builder.load(builder.gep(dx, [builder.add(b0, ir.Constant(_I64, 1))]))
        wo = builder.mul(p, ir.Constant(_I64, 2 * fmt.block_bytes))
        for r, cell in enumerate(cells):
            block0 = builder.gep(rows_at(r), [wo])
            for line in range(0, 2 * fmt.block_bytes, 64):
                prefetch_line(builder, builder.gep(block0, [builder.add(ahead, ir.Constant(_I64, line))]))
            groups = builder.gep(mins_at(r), [builder.mul(p, ir.Constant(_I64, 4))])
            builder.store(
                _pair_step(builder, fmt, block0, xlo, xhi, dx0, dx1, groups, builder.load(cell)), cell
            )
    for r, cell in enumerate(cells):  # the lanes to the accumulator rows, where the caller goes on
        builder.store(builder.load(cell), builder.bitcast(acc_at(r), _vec(_F32, 8).as_pointer()), align=4)


def _row_pointer(builder, data, stride, row, elem):
    return builder.bitcast(builder.gep(data, [builder.mul(row, stride)]), elem.as_pointer())


def _check(rows, x, dx, acc, mins):
    ok = (
        isinstance(rows, types.Array) and rows.ndim == 2 and rows.dtype == types.uint8  # rows of packed bytes
        and isinstance(x, types.Array) and x.ndim == 1 and x.dtype == types.int8
        and isinstance(dx, types.Array) and dx.ndim == 1 and dx.dtype == types.float32
        and all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.float32 and a.layout == "C"
                for a in (acc, mins))
    )  # fmt: skip
    if not ok:
        raise TypeError(f"lane row pairs take 2-D uint8 rows (bytes contiguous), 1-D int8 x and float32 dx, C float32 "
                        f"acc and mins: {rows}, {x}, {dx}, {acc}, {mins}")  # fmt: skip


def _make_pairs(fmt: BlockFormat):
    @intrinsic
    def pairs(typingctx, rows, x, dx, acc, mins, npairs):
        _check(rows, x, dx, acc, mins)

        def codegen(context, builder, sig, args):
            arrays = [
                context.make_array(ty)(context, builder, a)
                for ty, a in zip(sig.args[:5], args[:5], strict=True)
            ]
            rows_a, x_a, dx_a, acc_a, mins_a = arrays
            byte = lambda a: builder.bitcast(a.data, _I8.as_pointer())  # noqa: E731
            strides = [builder.extract_value(a.strides, 0) for a in (rows_a, acc_a, mins_a)]
            nrows = builder.extract_value(rows_a.shape, 0)
            n = context.cast(builder, args[5], sig.args[5], types.intp)
            x_ptr, dx_ptr = byte(x_a), builder.bitcast(dx_a.data, _F32.as_pointer())

            def pass_from(first, count):
                def at(a, stride, elem):
                    return lambda r: _row_pointer(
                        builder, byte(a), stride, builder.add(first, ir.Constant(_I64, r)), elem
                    )

                rows_at = at(rows_a, strides[0], _I8)
                acc_at, mins_at = at(acc_a, strides[1], _F32), at(mins_a, strides[2], _F32)
                ahead = builder.mul(strides[0], ir.Constant(_I64, count * PREFETCH_PASSES))
                _rows_pass(builder, fmt, rows_at, ahead, x_ptr, dx_ptr, acc_at, mins_at, n, count)

            groups = builder.udiv(nrows, ir.Constant(_I64, fmt.group))
            with cgutils.for_range(builder, groups) as loop:
                pass_from(builder.mul(loop.index, ir.Constant(_I64, fmt.group)), fmt.group)
            done = builder.mul(groups, ir.Constant(_I64, fmt.group))
            with cgutils.for_range(builder, builder.sub(nrows, done)) as loop:
                pass_from(builder.add(done, loop.index), 1)
            return context.get_dummy_value()

        return types.none(rows, x, dx, acc, mins, npairs), codegen

    return pairs


# 8-lane tiles only (AVX2 without AVX-512): the ones measured; 16-lane tiles keep cpu_lane_simd's pair steps
ROW_PAIRS = {name: _make_pairs(fmt) for name, fmt in FORMATS.items()} if LANES == 8 else {}
