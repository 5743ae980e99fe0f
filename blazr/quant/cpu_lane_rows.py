"""Whole-row lane dots for the 32-value block formats and the K-quants, each row's accumulator in registers
(blazr.quant.cpu_int8_lanes).

Why: cpu_lane_simd's intrinsics take one block (or block pair) of one row a call, adding into the row's
accumulator lanes in memory: a load, the multiply-adds and a store per call, and the kernels interleaved 8 rows
that way. Here one intrinsic runs the block-pair loop over all the rows it is given in LLVM IR, GROUP rows side
by side, each row's lanes an SSA value LLVM keeps in registers, and a pair's scales come from one half
conversion. The float arithmetic is cpu_lane_simd's (the int8 GEMM tile's) step for step, so every output is
bit-identical to the tile's (tests/test_quant_int8_lanes.py). Q4_1, one thread, Zen 1 class EPYC: 6.0-7.2 ->
3.7-4.0 ns a block and row (llama.cpp's AVX2 vec_dot on the same machine: 3.2-3.4).

A loop's unit is a block pair for the 32-value formats and a 256-value super-block for the K-quants, whose
scales (six-bit pairs or int8) are unpacked for all 8 groups at once as vectors: the memory-lane K-quant kernels
unpacked them one group at a time in scalar code and took 1.7-1.9x llama.cpp's time for Qwen2.5-Coder's
Q4_K / Q6_K down projections (a third of the gap in its decode step).

`loop(rows (R, row_bytes) uint8, x (Kp,) int8, dx (Kp/32,) float32, acc (>= R, LANES) float32,
mins (>= R, G) float32, units)` sets acc[i] to row i's lanes over its first `units` units (for block pairs the
caller adds an odd last block; then it finishes, as before) and writes row i's mins over them for formats with
offsets (4 a block pair, 16 a super-block).
"""

from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from blazr.quant.cpu_lane_simd import LANES, _lane_dots
from blazr.quant.cpu_simd import _load, _nibbles, _splat, _vec, four_halves, half_to_float, prefetch_line

_F32, _I32, _I64, _I8 = ir.FloatType(), ir.IntType(32), ir.IntType(64), ir.IntType(8)
# rows a pass takes side by side, as independent accumulator chains (Q4_1 at 1, 2, 4: 5.2, 4.7, 4.0 ns a block;
# Q5's bit expansion needs more registers: at 4 it spilled, 3 measured 4.8-5.2 ns against 5.0-5.7)
GROUP = 4
# Q5_0 / Q5_1 with AVX-512's 32 vector registers: four rows fit, and a kernel call's 8 rows are then two passes
# (with 3, two of them ran alone): Qwen2.5-Coder's Q5_0 gate 209-222 -> 161-175 us a matmul, streamed from
# memory, 2 threads, Zen 4 EPYC (rows at 6 and 8: 173-272)
GROUP_Q5 = 4 if LANES == 16 else 3
# how many passes ahead the prefetches read (Gemma 3's 262144 x 640 Q8_0 head at 1, 2, 4: the same 12.9-13.3 ms)
PREFETCH_PASSES = 1
# <8 x float> accumulators a row: the tile's 32-value block b adds into lanes (b % SPAN) * 8 .. + 8; with 16
# lanes two 256-bit halves, not one 512-bit vector (joined, the memory-lane kernels measured slower: see
# cpu_lane_simd._fma_pair)
SPAN = max(1, LANES // 8)


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
    "Q5_0": BlockFormat(22, 6, 2, "16d", group=GROUP_Q5),
    "Q5_1": BlockFormat(24, 8, 4, "-m", group=GROUP_Q5),
    "Q8_0": BlockFormat(34, 2, None, "", signed=True),
}


class SuperFormat(NamedTuple):
    """A 256-value K-quant super-block: 8 groups of 32 values, each its own scale (cpu_unpack's layout)."""

    block_bytes: int
    kind: str  # "q45_k" (Q4_K / Q5_K: d, dmin, six-bit scale and min pairs) or "q6_k" (int8 scales per 16)
    five: bool = False  # Q5_K's fifth bits
    # Q6_K one row a pass: a super-block's 8 groups are a long body, and 2-4 rows side by side spilled registers
    # (one thread, Zen 1 class EPYC, Qwen2.5-Coder's down projections: Q6_K 460 / 480 / 568 / 499 us at 1 / 2 /
    # 3 / 4 rows, the loops alone, alternating in one process); Q4_K four (its scales fit: below; Q5_K the same,
    # unmeasured: no Q5_K file here)
    group: int = 1


K_FORMATS = {
    "Q4_K": SuperFormat(144, "q45_k", group=4),
    "Q5_K": SuperFormat(176, "q45_k", five=True, group=4),
    "Q6_K": SuperFormat(210, "q6_k"),
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


def _pair_step(builder, fmt: BlockFormat, block0, xlo, xhi, dx0, dx1, mins_at, lanes: list):
    """One block pair of one row: its offsets stored at mins_at (4 floats), its products added to `lanes`
    (SPAN <8 x float> values: with 8-lane tiles the low block's, then the high one's into the one, as the
    tile's two steps; with 16 the low block's into the first and the high one's into the second, the 16-lane
    tile's one step); returns the lanes."""
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
    lanes = list(lanes)
    for b, (block, xv, d, dx) in enumerate(((block0, xlo, d0, dx0), (block1, xhi, d1, dx1))):
        dots = builder.sitofp(
            _lane_dots(builder, _values(builder, fmt, block), xv, fmt.signed), _vec(_F32, 8)
        )
        # cpu_lane_simd._lanes_fma's operations and flags: (ws dx), then one fused multiply-add
        scaled = builder.fmul(dots, _splat_float(builder, builder.fmul(d, dx), 8), flags=["contract"])
        lanes[b % SPAN] = builder.fadd(lanes[b % SPAN], scaled, flags=["contract"])
    return lanes


def _broadcast(builder, vec, lanes: list[int]):
    return builder.shuffle_vector(vec, vec, ir.Constant(_vec(_I32, len(lanes)), lanes))


def _at(builder, ptr, offset: int):
    return builder.gep(ptr, [ir.Constant(_I64, offset)])


def _q45_k_scales(builder, block):
    """(sc, m) <8 x i32>: the six-bit scale and min of each group of a Q4_K / Q5_K super-block (12 bytes at 4;
    cpu_int8_dots._k_scale_min for all 8 groups: groups 4..7 take their low four bits from bytes 8..11 and
    their top two from the bytes of groups 0..3), unpacked as 16 bytes (128-bit operations) and widened last."""
    s = _load(builder, _at(builder, block, 4), 16)  # 4 bytes past the scales: the block's values
    a = _broadcast(builder, s, [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11])
    b = _broadcast(builder, s, [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7])
    top = builder.shl(builder.lshr(b, _splat(builder, 6, 16)), _splat(builder, 4, 16))
    m_lanes = ir.Constant(_vec(ir.IntType(1), 16), [False] * 12 + [True] * 4)
    c = builder.select(
        m_lanes, builder.lshr(a, _splat(builder, 4, 16)), builder.and_(a, _splat(builder, 15, 16))
    )
    low_lanes = ir.Constant(_vec(ir.IntType(1), 16), ([True] * 4 + [False] * 4) * 2)
    both = builder.select(low_lanes, builder.and_(a, _splat(builder, 63, 16)), builder.or_(c, top))
    sc = builder.zext(_broadcast(builder, both, list(range(8))), _vec(_I32, 8))
    m = builder.zext(_broadcast(builder, both, list(range(8, 16))), _vec(_I32, 8))
    return sc, m


def _k_group_dot(builder, values, x, j: int, wsdx, lanes: list):
    """Group j's lane dots with x[32 j:] into lanes[j % SPAN] (group j is the tile's 32-value block j) with
    wsdx (<8 x float>, the tile's ws * dx per lane)."""
    dots = builder.sitofp(_lane_dots(builder, values, _load(builder, _at(builder, x, 32 * j), 32), False),
                          _vec(_F32, 8))  # fmt: skip
    lanes = list(lanes)
    lanes[j % SPAN] = builder.fadd(lanes[j % SPAN], builder.fmul(dots, wsdx, flags=["contract"]),
                                   flags=["contract"])  # fmt: skip
    return lanes


def _super_step(builder, fmt: SuperFormat, block, x, dx, mins_at, lanes):
    """One super-block of one row (x: its 256 int8 values, dx: their 8 scales): the 8 groups' products added
    to `lanes` in order, as cpu_int8_lanes' memory-lane K-quant kernels (ws = d sc, then ws dx per lane, then
    one fused multiply-add), and its 16 mins (one per 16 values) stored at mins_at; returns the lanes."""
    f8, f16 = _vec(_F32, 8), _vec(_F32, 16)
    dxv = builder.load(builder.bitcast(dx, f8.as_pointer()), align=4)  # (8,) the groups' x scales
    if fmt.kind == "q6_k":  # ql[128], qh[64], int8 scales[16] (one per 16 values), d
        d = half_to_float(builder, _at(builder, block, 208))
        ws = builder.fmul(_splat_float(builder, d, 16),
                          builder.sitofp(_load(builder, _at(builder, block, 192), 16), f16))  # fmt: skip
        mins = builder.fmul(_splat_float(builder, ir.Constant(_F32, 32.0), 16), ws)  # the format's + 32
        builder.store(mins, builder.bitcast(mins_at, f16.as_pointer()), align=4)
        wsdx = builder.fmul(ws, _broadcast(builder, dxv, [i // 2 for i in range(16)]))  # (16,) per 16 values
        for h in range(2):
            qh = _load(builder, _at(builder, block, 128 + 32 * h), 32)
            for q in range(4):
                ql = _load(builder, _at(builder, block, 64 * h + 32 * (q & 1)), 32)
                low = builder.and_(
                    builder.lshr(ql, _splat(builder, 4 * (q >> 1), 32)), _splat(builder, 15, 32)
                )
                high = builder.and_(builder.lshr(qh, _splat(builder, 2 * q, 32)), _splat(builder, 3, 32))
                values = builder.or_(low, builder.shl(high, _splat(builder, 4, 32)))
                j = 4 * h + q
                lanes = _k_group_dot(builder, values, x, j, _broadcast(builder, wsdx, [2 * j] * 4 + [2 * j + 1] * 4),
                                     lanes)  # fmt: skip
        return lanes
    # Q4_K / Q5_K: d, dmin, scales[12], (qh[32],) qs[128]
    two = four_halves(builder, block, block)  # d, dmin, d, dmin
    d, dmin = (builder.extract_element(two, ir.Constant(_I32, i)) for i in (0, 1))
    sc, m = _q45_k_scales(builder, block)
    ws = builder.fmul(_splat_float(builder, d, 8), builder.sitofp(sc, f8))
    mins = builder.fmul(_splat_float(builder, dmin, 8), builder.sitofp(m, f8))
    builder.store(_broadcast(builder, mins, [i // 2 for i in range(16)]), builder.bitcast(mins_at, f16.as_pointer()),
                  align=4)  # fmt: skip
    # ws dx through memory, each group's broadcast from there (a load, not a shuffle of registers: with the
    # bytes-wide scales, four rows a pass fit the registers; Q4_K loop 430 -> 410 us for Qwen2.5-Coder's down
    # projections, 77 -> 71 for Gemma 3's attention output, one thread, Zen 1 class EPYC)
    cell = cgutils.alloca_once(builder, f8)
    builder.store(builder.fmul(ws, dxv), cell, align=4)
    wsdx_at = builder.bitcast(cell, _F32.as_pointer())
    qh = _load(builder, _at(builder, block, 16), 32) if fmt.five else None
    one, four = _splat(builder, 1, 32), _splat(builder, 4, 32)
    for c in range(4):
        packed = _load(builder, _at(builder, block, (48 if fmt.five else 16) + 32 * c), 32)
        lo, hi = builder.and_(packed, _splat(builder, 15, 32)), builder.lshr(packed, four)
        if fmt.five:  # bit 2c (low group) and 2c + 1 (high group) of qh[lane] is bit 4 of the value
            bits = builder.lshr(qh, _splat(builder, 2 * c, 32))
            lo = builder.or_(lo, builder.shl(builder.and_(bits, one), four))
            hi = builder.or_(hi, builder.shl(builder.and_(builder.lshr(bits, one), one), four))
        for j, values in ((2 * c, lo), (2 * c + 1, hi)):
            w = _splat_float(builder, builder.load(builder.gep(wsdx_at, [ir.Constant(_I64, j)]), align=4), 8)
            lanes = _k_group_dot(builder, values, x, j, w, lanes)
    return lanes


def _rows_pass(builder, fmt, rows_at, ahead, x, dx, acc_at, mins_at, units, count: int):
    """The unit loop over `count` rows side by side: rows_at(i), acc_at(i), mins_at(i) give row i's pointers;
    each unit's bytes `ahead` bytes on (the next pass's rows: a matrix's rows are consecutive) are prefetched, as
    the memory-lane kernels did (SmolLM2's Q8_0 LM head, streamed from memory, took 1.55x the time without)."""
    zero = ir.Constant(_vec(_F32, 8), None)
    cells = [[cgutils.alloca_once_value(builder, zero) for _ in range(SPAN)] for _ in range(count)]
    pair = isinstance(fmt, BlockFormat)
    unit_bytes, unit_values = (2 * fmt.block_bytes, 64) if pair else (fmt.block_bytes, 256)
    with cgutils.for_range(builder, units) as loop:
        p = loop.index
        xo = builder.mul(p, ir.Constant(_I64, unit_values))
        b0 = builder.mul(p, ir.Constant(_I64, unit_values // 32))
        if pair:  # the pair's x and scales, loaded once for all the rows
            xlo = _load(builder, builder.gep(x, [xo]), 32)
            xhi = _load(builder, builder.gep(x, [builder.add(xo, ir.Constant(_I64, 32))]), 32)
            dx0 = builder.load(builder.gep(dx, [b0]))
            dx1 = builder.load(builder.gep(dx, [builder.add(b0, ir.Constant(_I64, 1))]))
        wo = builder.mul(p, ir.Constant(_I64, unit_bytes))
        for r, cell in enumerate(cells):
            block0 = builder.gep(rows_at(r), [wo])
            for line in range(0, unit_bytes, 64):
                prefetch_line(builder, builder.gep(block0, [builder.add(ahead, ir.Constant(_I64, line))]))
            groups = builder.gep(mins_at(r), [builder.mul(p, ir.Constant(_I64, unit_values // 16))])
            lanes = [builder.load(c) for c in cell]
            if pair:
                lanes = _pair_step(builder, fmt, block0, xlo, xhi, dx0, dx1, groups, lanes)
            else:
                lanes = _super_step(builder, fmt, block0, builder.gep(x, [xo]), builder.gep(dx, [b0]), groups,
                                    lanes)  # fmt: skip
            for c, value in zip(cell, lanes, strict=True):
                builder.store(value, c)
    # the lanes to the accumulator rows (8 floats a cell), where the caller goes on
    for r, cell in enumerate(cells):
        for k, c in enumerate(cell):
            at = builder.gep(acc_at(r), [ir.Constant(_I64, 8 * k)])
            builder.store(builder.load(c), builder.bitcast(at, _vec(_F32, 8).as_pointer()), align=4)


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


def _make_loop(fmt):
    @intrinsic
    def row_loop(typingctx, rows, x, dx, acc, mins, units):
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

        return types.none(rows, x, dx, acc, mins, units), codegen

    return row_loop


ROW_LOOPS = {name: _make_loop(fmt) for name, fmt in (FORMATS | K_FORMATS).items()} if LANES else {}
