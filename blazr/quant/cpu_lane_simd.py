"""numba intrinsics for decode dots that round exactly as the int8 GEMM tile does (blazr.quant.cpu_int8_lanes).

Why: a prompt's tokens go through the GEMM tile (cpu_gemm_simd) and a decode step's through row dots. If the two
sum their float32 products in different orders, a request's logits depend on whether its tokens were alone or
in a batch, and greedy text flips at near-ties (16 concurrent chats gave the solo text for 6 of 16). These
intrinsics give a decode kernel the tile's exact float arithmetic, cell by cell:

    acc[l] = acc[l] + float(lane dot l) * (ws[l] * dx)     (contracted to one fused multiply-add, as the tile)
    acc[l] = acc[l] - mins[g] * xsum[g]                    for group g = step * LANES + l, after every block
    total  = ((0 + acc[0]) + acc[1]) + ... + acc[LANES-1]  (an ordered reduction)

with LANES = the tile's lane count (16 with 64-byte steps, 8 with 32), so a 32-value block b writes lanes
(b % (LANES / 8)) * 8 .. + 8 of the accumulator, the lanes it takes in the tile. The integer lane dots are
exact in both; the weight values come from cpu_simd's per-format generators (the row dots' own).

The accumulator is a small float32 array (L1-resident) the caller zeroes per (row, token).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from blazr.quant.cpu_gemm_simd import LANE_BYTES, LANE_DOTS, _lane_dot
from blazr.quant.cpu_simd import (
    _byte_ptr,
    _check_bytes,
    _load,
    _q2_k_values,
    _q3_k_values,
    _q4_values,
    _q5_values,
    _q6_k_values,
    _q45_k_values,
    _splat,
)

_F32, _I32, _I64, _I8 = ir.FloatType(), ir.IntType(32), ir.IntType(64), ir.IntType(8)
# the tile's accumulator lanes (0 where the CPU has no int8 GEMM: nothing here is then compiled)
LANES = (LANE_BYTES or 0) // 4
# the 32-byte lane dot this CPU has (exact int32 sums of 4 products, like the tile's wider one)
_KIND32 = next((kind for step, kind in LANE_DOTS if step == 32), None)


def _vec(elem: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(elem, n)


def _float_ptr(context, builder, arrty, arr, offty, off):
    """float* to arr[off] of a 1-D float32 array."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [context.cast(builder, off, offty, types.intp)])


def _check_floats(*arrays) -> None:
    for arr in arrays:
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.float32):
            raise TypeError(f"lane intrinsics take 1-D float32 arrays, got {arr}")


def _lane_dots(builder, values, xv, signed: bool):
    """<n/4 x i32> exact sums of 4 products of the <n x i8> weight values (unsigned 0..63, or int8 with
    `signed`) and int8 x (> -128), n = 32 or 64 (the tile's own width), as the tile computes them."""
    n = values.type.count
    kind = _KIND32 if n == 32 else LANE_DOTS[0][1]
    if not signed:
        return _lane_dot(builder, values, xv, n // 4, kind)
    zero8 = _splat(builder, 0, n)
    if kind == "vnni":  # vpdpbusd(w + 128, x) started from -128 * (x's 4-value sums)
        bias = _lane_dot(builder, _splat(builder, 128, n), xv, n // 4, "vnni")
        start = builder.sub(ir.Constant(_vec(_I32, n // 4), None), bias)
        return _lane_dot(
            builder, builder.xor(values, _splat(builder, 128, n)), xv, n // 4, "vnni", start=start
        )
    negative = builder.icmp_signed("<", values, zero8)  # |w| times x with w's sign
    magnitude = builder.select(negative, builder.sub(zero8, values), values)
    if n == 32:  # AVX2's vpsignb: LLVM made the select 3 instructions (compare, xor, subtract); w = 0 gives 0
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_vec(_I8, 32), [_vec(_I8, 32)] * 2), "llvm.x86.avx2.psign.b"
        )
        return _lane_dot(builder, magnitude, builder.call(fn, [xv, values]), n // 4, kind)
    return _lane_dot(builder, magnitude, builder.select(negative, builder.sub(zero8, xv), xv), n // 4, kind)


def _lanes_fma(builder, values, xv, ptr, ws, dx, signed: bool = False):
    """*ptr (<n/4 x float> accumulator lanes) += float(lane dots of values and xv) * (ws * dx), lane l taking
    ws[l] and dx[l] (lists of float32 values): the tile's two operations, with its flags, which LLVM fuses
    into one multiply-add there and here."""
    lanes = values.type.count // 4
    fvec = _vec(_F32, lanes)
    wsv, dxv = ir.Constant(fvec, None), ir.Constant(fvec, None)
    for lane in range(lanes):
        wsv = builder.insert_element(wsv, ws[lane], ir.Constant(_I32, lane))
        dxv = builder.insert_element(dxv, dx[lane], ir.Constant(_I32, lane))
    dots = builder.sitofp(_lane_dots(builder, values, xv, signed), fvec)
    scaled = builder.fmul(dots, builder.fmul(wsv, dxv), flags=["contract"])
    ptr = builder.bitcast(ptr, fvec.as_pointer())
    builder.store(builder.fadd(builder.load(ptr, align=4), scaled, flags=["contract"]), ptr, align=4)


def _fma_block(context, builder, sig, args, values, at: int, signed: bool = False):
    """acc[ao:ao+8] += float(lane dots of values and x[xo:xo+32]) * ([ws0] * 4 + [ws1] * 4) * dx; the 7
    arguments (x, xo, acc, ao, ws0, ws1, dx) start at index `at`."""
    x, xo, acc, ao, ws0, ws1, dx = args[at : at + 7]
    ty = sig.args[at : at + 7]
    xv = _load(builder, _byte_ptr(context, builder, ty[0], x, ty[1], xo), 32)
    ptr = _float_ptr(context, builder, ty[2], acc, ty[3], ao)
    _lanes_fma(builder, values, xv, ptr, [ws0] * 4 + [ws1] * 4, [dx] * 8, signed)
    return context.get_dummy_value()


def _fma_pair(context, builder, sig, args, lo, hi, at: int, signed: bool = False):
    """Two consecutive 32-value blocks: lo (block b, even) with x[xo:xo+32] into lanes 0..7 and hi with
    x[xo+32:xo+64] into lanes 8..15 (a tile step when the tile is 16 lanes wide); with 8 lanes, lo then hi
    into lanes 0..7, as the tile's two steps. Arguments from `at`: x, xo, acc, ws0, dx0, ws1, dx1."""
    x, xo, acc, ws0, dx0, ws1, dx1 = args[at : at + 7]
    ty = sig.args[at : at + 7]
    px = _byte_ptr(context, builder, ty[0], x, ty[1], xo)
    ptr = _float_ptr(context, builder, ty[2], acc, types.intp, ir.Constant(_I64, 0))
    # two 32-byte lane dots, not one 64-byte one: joining the halves into a 512-bit vector measured slower
    # (Q4_K decode 1.25x the time on an AVX-512 Xeon); each lane's arithmetic is the same either way
    _lanes_fma(builder, lo, _load(builder, px, 32), ptr, [ws0] * 8, [dx0] * 8, signed)
    px_hi = builder.gep(px, [ir.Constant(_I32, 32)])
    ptr_hi = builder.gep(ptr, [ir.Constant(_I32, 8 if LANES == 16 else 0)])
    _lanes_fma(builder, hi, _load(builder, px_hi, 32), ptr_hi, [ws1] * 8, [dx1] * 8, signed)
    return context.get_dummy_value()


def _check_scalars(*values) -> None:
    for value in values:
        if value != types.float32:
            raise TypeError(f"lane intrinsics take float32 scales, got {value}")


def _fma_signature(w, lead, tail):
    _check_bytes(w, tail[0])
    _check_floats(tail[2])
    _check_scalars(*tail[4:])
    return types.none(w, *lead, *tail)


@intrinsic
def fma_q4(typingctx, w, wo, x, xo, acc, ao, ws0, ws1, dx):
    """Q4_0/Q4_1/I4Z block at wo (dot_q4's values) into acc[ao:ao+8] (see the module docstring)."""

    def codegen(context, builder, sig, args):
        return _fma_block(context, builder, sig, args, _q4_values(context, builder, sig, args), 2)

    return _fma_signature(w, (wo,), (x, xo, acc, ao, ws0, ws1, dx)), codegen


@intrinsic
def fma_q5(typingctx, w, qso, qho, x, xo, acc, ao, ws0, ws1, dx):
    """Q5_0/Q5_1 block (dot_q5's values) into acc[ao:ao+8]."""

    def codegen(context, builder, sig, args):
        return _fma_block(context, builder, sig, args, _q5_values(context, builder, sig, args), 3)

    return _fma_signature(w, (qso, qho), (x, xo, acc, ao, ws0, ws1, dx)), codegen


@intrinsic
def fma_i8(typingctx, w, wo, x, xo, acc, ao, ws0, ws1, dx):
    """Q8_0 block: 32 signed weight bytes at wo into acc[ao:ao+8]."""

    def codegen(context, builder, sig, args):
        values = _load(builder, _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1]), 32)
        return _fma_block(context, builder, sig, args, values, 2, signed=True)

    return _fma_signature(w, (wo,), (x, xo, acc, ao, ws0, ws1, dx)), codegen


def _pair_signature(w, lead, tail):
    _check_bytes(w, tail[0])
    _check_floats(tail[2])
    _check_scalars(*tail[3:])
    return types.none(w, *lead, *tail)


def _args_at(sig, args, picks):
    """A (signature, arguments) view of the arguments at `picks`, for the value generators."""
    return types.none(*(sig.args[i] for i in picks)), [args[i] for i in picks]


@intrinsic
def fma_q4_pair(typingctx, w, wo0, wo1, x, xo, acc, ws0, dx0, ws1, dx1):
    """Q4_0/Q4_1/I4Z blocks b (even, at wo0) and b + 1 (at wo1) with x[xo:xo+64]: one tile step into acc."""

    def codegen(context, builder, sig, args):
        lo = _q4_values(context, builder, *_args_at(sig, args, (0, 1)))
        hi = _q4_values(context, builder, *_args_at(sig, args, (0, 2)))
        return _fma_pair(context, builder, sig, args, lo, hi, 3)

    return _pair_signature(w, (wo0, wo1), (x, xo, acc, ws0, dx0, ws1, dx1)), codegen


@intrinsic
def fma_q5_pair(typingctx, w, qso0, qho0, qso1, qho1, x, xo, acc, ws0, dx0, ws1, dx1):
    """Q5_0/Q5_1 blocks b (even) and b + 1: one tile step into acc."""

    def codegen(context, builder, sig, args):
        lo = _q5_values(context, builder, *_args_at(sig, args, (0, 1, 2)))
        hi = _q5_values(context, builder, *_args_at(sig, args, (0, 3, 4)))
        return _fma_pair(context, builder, sig, args, lo, hi, 5)

    return _pair_signature(w, (qso0, qho0, qso1, qho1), (x, xo, acc, ws0, dx0, ws1, dx1)), codegen


@intrinsic
def fma_i8_pair(typingctx, w, wo0, wo1, x, xo, acc, ws0, dx0, ws1, dx1):
    """Q8_0 blocks b (even, signed bytes at wo0) and b + 1 (at wo1): one tile step into acc."""

    def codegen(context, builder, sig, args):
        lo, hi = (
            _load(builder, _byte_ptr(context, builder, sig.args[0], args[0], sig.args[i], args[i]), 32)
            for i in (1, 2)
        )
        return _fma_pair(context, builder, sig, args, lo, hi, 3, signed=True)

    return _pair_signature(w, (wo0, wo1), (x, xo, acc, ws0, dx0, ws1, dx1)), codegen


@intrinsic
def fma_q2_k(typingctx, w, qo, shift, x, xo, acc, ao, ws0, ws1, dx):
    """Q2_K field (dot_q2_k's values; ws0 / ws1 the scales of its two 16-value groups) into acc[ao:ao+8]."""

    def codegen(context, builder, sig, args):
        return _fma_block(context, builder, sig, args, _q2_k_values(context, builder, sig, args), 3)

    return _fma_signature(w, (qo, shift), (x, xo, acc, ao, ws0, ws1, dx)), codegen


@intrinsic
def fma_q3_k(typingctx, w, qo, shift, ho, bit, x, xo, acc, ao, ws0, ws1, dx):
    """Q3_K field (dot_q3_k's values, the format's + 4) into acc[ao:ao+8]."""

    def codegen(context, builder, sig, args):
        return _fma_block(context, builder, sig, args, _q3_k_values(context, builder, sig, args), 5)

    return _fma_signature(w, (qo, shift, ho, bit), (x, xo, acc, ao, ws0, ws1, dx)), codegen


@intrinsic
def fma_q6_k(typingctx, w, qlo, qho, ql_shift, qh_shift, x, xo, acc, ao, ws0, ws1, dx):
    """Q6_K quarter (dot_q6_k's values, the format's + 32) into acc[ao:ao+8]."""

    def codegen(context, builder, sig, args):
        return _fma_block(context, builder, sig, args, _q6_k_values(context, builder, sig, args), 5)

    return _fma_signature(w, (qlo, qho, ql_shift, qh_shift), (x, xo, acc, ao, ws0, ws1, dx)), codegen


def _fma_chunk(context, builder, sig, args, at: int, with_high: bool):
    """A Q4_K/Q5_K chunk: its low group (an even block) and high group as one tile step (_fma_pair);
    arguments from `at`: x, xo, acc, ws_lo, dx_lo, ws_hi, dx_hi."""
    lo, hi = _q45_k_values(context, builder, sig, args, with_high)
    return _fma_pair(context, builder, sig, args, lo, hi, at)


@intrinsic
def fma_q4_k(typingctx, w, wo, x, xo, acc, ws_lo, dx_lo, ws_hi, dx_hi):
    """Q4_K chunk of 32 bytes at wo (dot_q4_k's values) with x[xo:xo+64]: one tile step into acc."""
    _check_bytes(w, x)
    _check_floats(acc)
    _check_scalars(ws_lo, dx_lo, ws_hi, dx_hi)

    def codegen(context, builder, sig, args):
        return _fma_chunk(context, builder, sig, args, 2, with_high=False)

    return types.none(w, wo, x, xo, acc, ws_lo, dx_lo, ws_hi, dx_hi), codegen


@intrinsic
def fma_q5_k(typingctx, w, wo, qho, c, x, xo, acc, ws_lo, dx_lo, ws_hi, dx_hi):
    """Q5_K chunk c (dot_q5_k's values): as fma_q4_k."""
    _check_bytes(w, x)
    _check_floats(acc)
    _check_scalars(ws_lo, dx_lo, ws_hi, dx_hi)

    def codegen(context, builder, sig, args):
        return _fma_chunk(context, builder, sig, args, 4, with_high=True)

    return types.none(w, wo, qho, c, x, xo, acc, ws_lo, dx_lo, ws_hi, dx_hi), codegen


# rows whose offset loops lane_finish_rows interleaves: each row's loop is one chain of dependent multiply-adds
# (a 4864-long row, Qwen2.5-Coder's down projection: 38 steps), and rows side by side overlap the chains
FINISH_ROWS = 8


@intrinsic
def lane_finish_rows(typingctx, acc, mins, xsum, steps, out):
    """out[i] = row i's cell from its accumulator, for each i < len(out) (acc (>= R, LANES), mins (>= R, G) C
    float32; xsum (G,), out (R,) float32): acc[i, l] -= mins[i, s LANES + l] * xsum[s LANES + l] for s < steps
    (the tile's offset loop, its flags too; steps = 0 for formats without offsets), then (((0 + acc[i, 0]) +
    acc[i, 1]) + ...) over the LANES lanes, the tile's ordered reduction; FINISH_ROWS rows' loops side by side.
    Works on 8-lane halves, as the blocks stored them: one wider load of narrower stores waits for them to reach
    the cache (no store forwarding), which cost a quarter of a small matrix's decode time."""
    ok = (
        all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.float32 and a.layout == "C" for a in (acc, mins))
        and all(isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.float32 for a in (xsum, out))
    )  # fmt: skip
    if not ok:
        raise TypeError(f"lane_finish_rows takes C float32 (rows, n) acc and mins, 1-D float32 xsum and out: "
                        f"{acc}, {mins}, {xsum}, {out}")  # fmt: skip

    def codegen(context, builder, sig, args):
        fvec = _vec(_F32, 8)
        acc_a, mins_a, xsum_a, out_a = (
            context.make_array(sig.args[i])(context, builder, args[i]) for i in (0, 1, 2, 4)
        )
        strides = [builder.extract_value(a.strides, 0) for a in (acc_a, mins_a)]
        out_stride = builder.extract_value(out_a.strides, 0)
        xsum_ = builder.bitcast(xsum_a.data, fvec.as_pointer())
        nsteps = context.cast(builder, args[3], sig.args[3], types.intp)
        nrows = builder.extract_value(out_a.shape, 0)
        halves = LANES // 8
        fnty = ir.FunctionType(_F32, [_F32, fvec])
        reduce_fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.vector.reduce.fadd.v8f32")

        def row_ptr(a, stride, row):
            at = builder.gep(builder.bitcast(a.data, _I8.as_pointer()), [builder.mul(row, stride)])
            return builder.bitcast(at, fvec.as_pointer())

        def finish_from(first, count):
            rows = [builder.add(first, ir.Constant(_I64, r)) for r in range(count)]
            accs = [row_ptr(acc_a, strides[0], row) for row in rows]
            mins_ = [row_ptr(mins_a, strides[1], row) for row in rows]
            cells = [[cgutils.alloca_once_value(builder, builder.load(builder.gep(a, [ir.Constant(_I64, h)]), align=4))
                      for h in range(halves)] for a in accs]  # fmt: skip
            with cgutils.for_range(builder, nsteps) as loop:
                for m, row_cells in zip(mins_, cells, strict=True):
                    for h, cell in enumerate(row_cells):
                        at = builder.add(
                            builder.mul(loop.index, ir.Constant(_I64, halves)), ir.Constant(_I64, h)
                        )
                        offset = builder.fmul(builder.load(builder.gep(m, [at]), align=4),
                                              builder.load(builder.gep(xsum_, [at]), align=4), flags=["contract"])  # fmt: skip
                        builder.store(builder.fsub(builder.load(cell), offset, flags=["contract"]), cell)
            for row, row_cells in zip(rows, cells, strict=True):
                total = ir.Constant(_F32, 0.0)
                for cell in row_cells:  # an ordered reduction of the low half continued over the high one
                    total = builder.call(reduce_fn, [total, builder.load(cell)])
                at = builder.gep(
                    builder.bitcast(out_a.data, _I8.as_pointer()), [builder.mul(row, out_stride)]
                )
                builder.store(total, builder.bitcast(at, _F32.as_pointer()))

        passes = builder.udiv(nrows, ir.Constant(_I64, FINISH_ROWS))
        with cgutils.for_range(builder, passes) as loop:
            finish_from(builder.mul(loop.index, ir.Constant(_I64, FINISH_ROWS)), FINISH_ROWS)
        done = builder.mul(passes, ir.Constant(_I64, FINISH_ROWS))
        with cgutils.for_range(builder, builder.sub(nrows, done)) as loop:
            finish_from(builder.add(done, loop.index), 1)
        return context.get_dummy_value()

    return types.none(acc, mins, xsum, steps, out), codegen


@intrinsic
def lane_zero(typingctx, acc):
    """acc[:LANES] = 0 as one vector store (a slice assignment became a memset call per cell)."""
    _check_floats(acc)

    def codegen(context, builder, sig, args):
        fvec = _vec(_F32, LANES)
        ptr = _float_ptr(context, builder, sig.args[0], args[0], types.intp, ir.Constant(_I64, 0))
        builder.store(ir.Constant(fvec, None), builder.bitcast(ptr, fvec.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(acc), codegen
