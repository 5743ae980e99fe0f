"""The int8 GEMM micro-kernel: a register-blocked tile of ROWS weight rows x TOKENS tokens as one numba intrinsic.

Why an intrinsic: the inner loop must keep ROWS * TOKENS vector accumulators in registers and issue one
`vpdpbusd` per (row, token, 64 values); numba code cannot hold SIMD vectors, and generic LLVM vector IR
turns a *partial* reduction (64 byte products into 16 lanes of 4) into shuffles rather than `vpdpbusd`
(measured 11.8 G multiply-adds/s against 85 for the instruction). So the kernel calls x86 intrinsics
directly, the best the CPU numba compiles for has (`LANE_DOT`):
    "vnni"     vpdpbusd: AVX512-VNNI (64 bytes a step) or AVX-VNNI (32)
    "maddubs"  vpmaddubsw then vpmaddwd by ones, llama.cpp's AVX2 way: AVX512-BW (64) or AVX2 (32); the
               16-bit pair sums cannot saturate since every unpacked weight is at most 63 (|2 * 63 * 127|)
and none elsewhere (`LANE_BYTES` is None: the CPU backend then keeps float32 activations for every matmul).

Signed weights (Q8_0: -128..127, so neither the u8 operand nor the 63 bound above holds) take a variant of
each tile (SIGNED_TILE_KERNELS), exact in int32 like the unsigned one and like the decode row dot:
    "vnni"     vpdpbusd(w + 128, x) started from -128 * (x's 4-value sums), llama.cpp's way and the row dot's
               (cpu_simd.dot_i8_biased): the unsigned operand is w with its sign bit flipped, and its bias
               is taken off in the instruction's own accumulator input, a vpdpbusd per token a step
    "maddubs"  vpmaddubsw(|w|, x with w's sign), llama.cpp's AVX2 sign trick: |w| <= 128 and |x| <= 127
               (quantize_rows never gives -128), so a 16-bit pair is at most 2 * 128 * 127 = 32512

Per step and per (row r, token t), with w the unpacked weight bytes (blazr.quant.cpu_unpack) and x the
int8 activations:
    dot   = lane_dot(w[r], x[t])               int32 lanes, lane l = sum of 4 products (values 4l..4l+3)
    acc  += float(dot) * ws[r] * dx[t]         ws: the weights' scale per lane; dx: x's scale per 32 values
which is exact integer arithmetic inside each lane and one float multiply-add per 4 values; the lanes
are summed once, after the last step. Offsets and minimums are subtracted in the same tile with the sums
of x (see gemm_tile).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from blazr.quant.cpu_target import FEATURES

ROWS, TOKENS = 4, 3  # the register tile: (4, 3) and (3, 4) measured fastest, 85-89 G multiply-adds/s a core
SCRATCH_BYTES = 1 << 18  # a GEMM task's unpacked or decoded rows: 256 KB of a 2 MB L2
X_CHUNK_BYTES = 1 << 19  # activations reread per row tile, a token chunk at a time: 512 KB


def rows_per_task(n: int, row_bytes: float, threads: int) -> int:
    """Rows per parallel GEMM task for n rows taking row_bytes of scratch each: about 8 tasks a thread,
    within SCRATCH_BYTES, a multiple of ROWS."""
    budget = max(ROWS, int(SCRATCH_BYTES // row_bytes) // ROWS * ROWS)
    balanced = -(-n // (8 * threads))
    return max(ROWS, min(budget, -(-balanced // ROWS) * ROWS))


_I8, _I32, _I64, _F32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()


def _vec(elem: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(elem, n)


def _lane_dot_kinds(features: set[str]) -> list[tuple[int, str]]:
    """Every (bytes a step, kind) of lane dot the CPU can run, fastest first."""
    kinds = []
    if {"avx512vnni", "avx512bw"} <= features:
        kinds.append((64, "vnni"))
    if "avxvnni" in features or {"avx512vnni", "avx512vl"} <= features:
        kinds.append((32, "vnni"))
    if "avx512bw" in features:
        kinds.append((64, "maddubs"))
    if "avx2" in features:
        kinds.append((32, "maddubs"))
    return kinds


LANE_DOTS: list[tuple[int, str]] = _lane_dot_kinds(FEATURES)
LANE_BYTES, LANE_DOT = LANE_DOTS[0] if LANE_DOTS else (None, None)


def _row_ptr(context, builder, aryty, ary, row, byte_offset):
    """i8* to byte `byte_offset` of row `row` of a C-contiguous 2-D array."""
    arr = context.make_array(aryty)(context, builder, ary)
    stride = builder.extract_value(arr.strides, 0)
    base = builder.bitcast(arr.data, _I8.as_pointer())
    return builder.gep(base, [builder.add(builder.mul(row, stride), byte_offset)])


def _load(builder, ptr, ty: ir.Type):
    return builder.load(builder.bitcast(ptr, ty.as_pointer()), align=1)


def _lane_dot(builder, w, x, lanes: int, kind: str, start=None):
    """<4 lanes x i8> unsigned w, signed x -> <lanes x i32>, lane l = sum_{j<4} w[4l + j] * x[4l + j]
    (plus lane l of the <lanes x i32> `start`, "vnni" only: the instruction's accumulator input)."""
    i32s, bits = _vec(_I32, lanes), 32 * lanes
    if kind == "vnni":
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32s, [i32s] * 3), f"llvm.x86.avx512.vpdpbusd.{bits}"
        )
        start = ir.Constant(i32s, None) if start is None else start
        return builder.call(fn, [start, builder.bitcast(w, i32s), builder.bitcast(x, i32s)])
    i8s, i16s = _vec(_I8, 4 * lanes), _vec(ir.IntType(16), 2 * lanes)
    pairs_name = "llvm.x86.avx512.pmaddubs.w.512" if bits == 512 else "llvm.x86.avx2.pmadd.ub.sw"
    quads_name = "llvm.x86.avx512.pmaddw.d.512" if bits == 512 else "llvm.x86.avx2.pmadd.wd"
    pairs_fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i16s, [i8s, i8s]), pairs_name)
    quads_fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32s, [i16s, i16s]), quads_name)
    pairs = builder.call(pairs_fn, [w, x])  # (2 lanes) int16 sums of 2 products
    ones = ir.Constant(i16s, [ir.Constant(ir.IntType(16), 1)] * (2 * lanes))
    return builder.call(quads_fn, [pairs, ones])


def _check_2d(**arrays) -> None:
    for name, (arr, dtype) in arrays.items():
        if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.layout == "C" and arr.dtype == dtype):
            raise TypeError(f"gemm_tile's {name} must be a C-contiguous 2-D {dtype} array, got {arr}")


def _accumulators(builder, fvec):
    """ROWS x TOKENS zeroed vector accumulators (allocas that LLVM keeps in registers)."""
    zero = ir.Constant(fvec, None)
    return [[cgutils.alloca_once_value(builder, zero) for _ in range(TOKENS)] for _ in range(ROWS)]


def _store_sums(context, builder, accs, aryty, ary, rows, tokens):
    """ary[t, row] = the sum of the lanes of accs[r][c] for each tile row r and token c."""
    fvec = accs[0][0].type.pointee
    reduce_fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_F32, [_F32, fvec]), f"llvm.vector.reduce.fadd.v{fvec.count}f32"
    )
    for r, row in enumerate(rows):
        for c, t in enumerate(tokens):
            total = builder.call(reduce_fn, [ir.Constant(_F32, 0.0), builder.load(accs[r][c])])
            ptr = _row_ptr(context, builder, aryty, ary, t, builder.mul(row, ir.Constant(_I64, 4)))
            builder.store(total, builder.bitcast(ptr, _F32.as_pointer()))


def _splat8(builder, value: int, n: int):
    return ir.Constant(_vec(_I8, n), [ir.Constant(_I8, value)] * n)


def _signed_operands(builder, step: int, lanes: int, kind: str):
    """(per_token, per_row, pair) for signed weight bytes (see the module docstring), each hoisted as far
    out of the (row, token) pairs as it goes: per_token(x) and per_row(w) run once a step, pair(row, token)
    gives the lane dot of one pair, exact int32."""
    zero8, i32s = _splat8(builder, 0, step), _vec(_I32, lanes)
    if kind == "vnni":

        def per_token(x):  # (x, -128 * its 4-value sums): the bias of the flipped w, taken off in vpdpbusd
            bias = _lane_dot(builder, _splat8(builder, 128, step), x, lanes, kind)
            return x, builder.sub(ir.Constant(i32s, None), bias)

        def per_row(w):  # w + 128 as an unsigned byte
            return builder.xor(w, _splat8(builder, 128, step))

        def pair(row, token):
            return _lane_dot(builder, row, token[0], lanes, kind, start=token[1])

    else:

        def per_token(x):
            return x, builder.sub(zero8, x)  # -x has no overflow: x >= -127

        def per_row(w):  # (|w| as an unsigned byte, 128 for -128; w < 0)
            negative = builder.icmp_signed("<", w, zero8)
            return builder.select(negative, builder.sub(zero8, w), w), negative

        def pair(row, token):  # |w| * (x with w's sign) = w * x, byte by byte
            return _lane_dot(builder, row[0], builder.select(row[1], token[1], token[0]), lanes, kind)

    return per_token, per_row, pair


def _make_tile_kernel(step: int, kind: str, signed: bool = False):
    """The micro-kernel with `step` bytes per lane dot (64 or 32) of `kind`; see gemm_tile (and
    gemm_tile_signed with `signed`: int8 weight bytes, no offsets)."""
    lanes = step // 4
    blocks = step // 32  # 32-value scales of x per step

    @intrinsic
    def gemm_tile(typingctx, q, ws, mins, xq, dx, xsum, acc, r0, t0, steps, group_steps):
        f32 = types.float32
        _check_2d(q=(q, types.uint8), ws=(ws, f32), mins=(mins, f32), xq=(xq, types.int8), dx=(dx, f32))
        _check_2d(xsum=(xsum, f32), acc=(acc, f32))

        def codegen(context, builder, sig, args):
            q_, ws_, mins_, xq_, dx_, xsum_, acc_ = args[:7]
            aty = sig.args
            r0v, t0v, nsteps, ngroups = (
                context.cast(builder, v, aty[i], types.intp) for i, v in enumerate(args[7:], 7)
            )
            const = lambda v: ir.Constant(_I64, v)  # noqa: E731
            fvec = _vec(_F32, lanes)

            def row_vec(arg, array, row, byte, ty):
                return _load(builder, _row_ptr(context, builder, aty[arg], array, row, byte), ty)

            rows = [builder.add(r0v, const(r)) for r in range(ROWS)]
            tokens = [builder.add(t0v, const(c)) for c in range(TOKENS)]
            accs = _accumulators(builder, fvec)
            spread = ir.Constant(_vec(_I32, lanes), [lane // 8 for lane in range(lanes)])
            if signed:
                per_token, per_row, pair = _signed_operands(builder, step, lanes, kind)
            else:
                per_token = per_row = lambda v: v  # noqa: E731

                def pair(w, x):
                    return _lane_dot(builder, w, x, lanes, kind)

            with cgutils.for_range(builder, nsteps) as loop:
                xbyte = builder.mul(
                    loop.index, const(step)
                )  # offset into rows of q, xq and (4 values a float) ws
                dbyte = builder.mul(loop.index, const(4 * blocks))  # offset into rows of dx
                xs, dxs = [], []
                for t in tokens:
                    xs.append(per_token(row_vec(3, xq_, t, xbyte, _vec(_I8, step))))
                    d = row_vec(4, dx_, t, dbyte, _vec(_F32, blocks))
                    dxs.append(builder.shuffle_vector(d, d, spread))  # each 32-value scale over its 8 lanes
                for r, row in enumerate(rows):
                    w = per_row(row_vec(0, q_, row, xbyte, _vec(_I8, step)))
                    s = row_vec(1, ws_, row, xbyte, fvec)
                    for c in range(TOKENS):
                        dot = builder.sitofp(pair(w, xs[c]), fvec)
                        scaled = builder.fmul(dot, builder.fmul(s, dxs[c]), flags=["contract"])
                        cell = accs[r][c]
                        builder.store(builder.fadd(builder.load(cell), scaled, flags=["contract"]), cell)
            # offsets: acc -= mins[r, g] * xsum[t, g] over 16-value groups g, `lanes` groups a step (signed
            # weights have none: Q8_0 is d * q)
            with cgutils.for_range(builder, ir.Constant(_I64, 0) if signed else ngroups) as loop:
                gbyte = builder.mul(loop.index, const(4 * lanes))
                sums = [row_vec(5, xsum_, t, gbyte, fvec) for t in tokens]
                for r, row in enumerate(rows):
                    m = row_vec(2, mins_, row, gbyte, fvec)
                    for c in range(TOKENS):
                        cell = accs[r][c]
                        offset = builder.fmul(m, sums[c], flags=["contract"])
                        builder.store(builder.fsub(builder.load(cell), offset, flags=["contract"]), cell)
            _store_sums(context, builder, accs, aty[6], acc_, rows, tokens)
            return context.get_dummy_value()

        return types.none(q, ws, mins, xq, dx, xsum, acc, r0, t0, steps, group_steps), codegen

    return gemm_tile


# gemm_tile(q (R, Kp) uint8, ws (R, Kp/4) f32, mins (R, G) f32, xq (T, Kp) int8, dx (T, Kp/32) f32,
#           xsum (T, G) f32, acc (T, R) f32, r0, t0, steps, group_steps), for r < ROWS and c < TOKENS:
#   acc[t0 + c, r0 + r] = sum_j ws[r', j / 4] * dx[t', j / 32] * q[r', j] * xq[t', j]  - sum_g mins[r', g] xsum[t', g]
#   (r' = r0 + r, t' = t0 + c) over the first steps * step values j and the first group_steps * step / 4
#   groups g. Every row and token it reads must exist: callers pad to ROWS, TOKENS and whole steps with zeros.
# gemm_tile_signed: the same arguments and sum, with q int8 weight bytes (viewed as uint8; -128..127) and
#   xq in -127..127; mins and xsum are not read (no offsets).
# Every variant this CPU runs (the tests compare them); gemm_tile(_signed) is the first, None without any.
TILE_KERNELS = {(step, kind): _make_tile_kernel(step, kind) for step, kind in LANE_DOTS}
SIGNED_TILE_KERNELS = {(step, kind): _make_tile_kernel(step, kind, True) for step, kind in LANE_DOTS}
gemm_tile = TILE_KERNELS[LANE_DOTS[0]] if LANE_DOTS else None
gemm_tile_signed = SIGNED_TILE_KERNELS[LANE_DOTS[0]] if LANE_DOTS else None


def _make_f32_tile_kernel():
    """gemm_tile_f32: the float32 counterpart, for rows decoded to float32 (blazr.quant.cpu_f32_gemm)."""
    lanes = 16

    @intrinsic
    def gemm_tile_f32(typingctx, w, x, acc, r0, t0, steps):
        _check_2d(w=(w, types.float32), x=(x, types.float32), acc=(acc, types.float32))

        def codegen(context, builder, sig, args):
            w_, x_, acc_ = args[:3]
            aty = sig.args
            r0v, t0v, nsteps = (
                context.cast(builder, v, aty[i], types.intp) for i, v in enumerate(args[3:], 3)
            )
            const = lambda v: ir.Constant(_I64, v)  # noqa: E731
            fvec = _vec(_F32, lanes)
            rows = [builder.add(r0v, const(r)) for r in range(ROWS)]
            tokens = [builder.add(t0v, const(c)) for c in range(TOKENS)]
            accs = _accumulators(builder, fvec)
            with cgutils.for_range(builder, nsteps) as loop:
                byte = builder.mul(loop.index, const(4 * lanes))
                xs = [_load(builder, _row_ptr(context, builder, aty[1], x_, t, byte), fvec) for t in tokens]
                for r, row in enumerate(rows):
                    wv = _load(builder, _row_ptr(context, builder, aty[0], w_, row, byte), fvec)
                    for c in range(TOKENS):
                        cell = accs[r][c]
                        prod = builder.fmul(wv, xs[c], flags=["contract"])
                        builder.store(builder.fadd(builder.load(cell), prod, flags=["contract"]), cell)
            _store_sums(context, builder, accs, aty[2], acc_, rows, tokens)
            return context.get_dummy_value()

        return types.none(w, x, acc, r0, t0, steps), codegen

    return gemm_tile_f32


# gemm_tile_f32(w (R, Kp) f32, x (T, Kp) f32, acc (T, R) f32, r0, t0, steps), for r < ROWS and c < TOKENS:
#   acc[t0 + c, r0 + r] = sum over the first steps * 16 values j of w[r0 + r, j] * x[t0 + c, j].
# Plain LLVM vector IR: fused multiply-adds on any CPU (16 lanes: one AVX-512 register, two AVX ones).
F32_STEP = 16
gemm_tile_f32 = _make_f32_tile_kernel()
