"""numba intrinsics that emit LLVM vector IR for the small integer dot products of the int8 kernels.

Why: numba widens int8/int32 arithmetic to int64 lanes, so plain numba code never reaches the CPUs' 8-bit dot
instructions. Here each dot is written as generic LLVM IR: load 32 bytes, build the 32 weight values as
<32 x i8>, zero-extend them and sign-extend the int8 activations to <32 x i32>, multiply, reduce.add. LLVM
matches that pattern to the best instruction it has: vpdpbusd on x86 with AVX-VNNI / AVX512-VNNI (checked
with inspect_asm), pmaddwd on plain AVX2, sdot / smull+sadalp on ARM. Weights are always unsigned
(0..255) and activations signed, the operand order of vpdpbusd; a format with signed or offset values
subtracts offset * sum(x) afterwards (cpu_int8_dots), as llama.cpp does.

Every function takes byte arrays and byte offsets: `w` a 1-D uint8 row, `x` a 1-D int8 activation row, both
contiguous. Nothing is bounds checked; the caller keeps every read inside the arrays.
numba's on-disk cache keys compiled code on the CPU name and features, so code built here for one CPU (e.g.
with vpdpbusd) is never loaded on another.
"""

from __future__ import annotations

import llvmlite.binding as llb
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from blazr.quant.cpu_target import NATIVE_HALF, X86

# the half conversions' x86 code is inline asm (half_to_float, four_halves): numba's JIT assembles it only
# with the asm parser
llb.initialize_native_asmparser()

_I8, _I32 = ir.IntType(8), ir.IntType(32)
_PAIR = types.UniTuple(types.int32, 2)


def _vec(elem: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(elem, n)


def _splat(builder, value: int, n: int) -> ir.Constant:
    return ir.Constant(_vec(_I8, n), [ir.Constant(_I8, value)] * n)


def _splat_var(builder, value, n: int):
    """A runtime i8 in every lane (folds to a constant when the value is one after inlining)."""
    one = builder.insert_element(ir.Constant(_vec(_I8, 1), None), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(_vec(_I32, n), [0] * n))


def _byte_ptr(context, builder, arrty, arr, offty, off):
    """i8* to arr[off] of a 1-D byte array."""
    data = context.make_array(arrty)(context, builder, arr).data
    index = context.cast(builder, off, offty, types.intp)
    return builder.bitcast(builder.gep(data, [index]), _I8.as_pointer())


def _load(builder, ptr, n: int):
    """<n x i8> from any byte address (align 1: rows are packed blocks, not vector aligned)."""
    return builder.load(builder.bitcast(ptr, _vec(_I8, n).as_pointer()), align=1)


def _small_int(context, builder, ty, value):
    return builder.trunc(context.cast(builder, value, ty, types.int32), _I8)


def _nibbles(builder, packed):
    """<16 x i8> packed -> <32 x i8>: the 16 low nibbles, then the 16 high ones (Q4_0/Q4_1/Q5 order)."""
    lo = builder.and_(packed, _splat(builder, 15, 16))
    hi = builder.lshr(packed, _splat(builder, 4, 16))
    return builder.shuffle_vector(lo, hi, ir.Constant(_vec(_I32, 32), list(range(32))))


def _reduce(builder, v):
    fnty = ir.FunctionType(_I32, [v.type])
    fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.vector.reduce.add.v{v.type.count}i32")
    return builder.call(fn, [v])


def _products(builder, w, x):
    """<n x i32> of zext(w) * sext(x): the operand pattern LLVM turns into vpdpbusd / pmaddwd / sdot."""
    n = w.type.count
    return builder.mul(builder.zext(w, _vec(_I32, n)), builder.sext(x, _vec(_I32, n)))


def _half(builder, v, which: int):
    """Lanes 0..15 (which = 0) or 16..31 (which = 1) of a <32 x i8>."""
    return builder.shuffle_vector(v, v, ir.Constant(_vec(_I32, 16), list(range(16 * which, 16 * which + 16))))


def _dot_halves(builder, w, x):
    """The dots of lanes 0..15 and 16..31 of two <32 x i8>, split before the multiply so that each half is
    the zext * sext + reduce pattern LLVM turns into one 16-byte vpdpbusd."""
    lo = _reduce(builder, _products(builder, _half(builder, w, 0), _half(builder, x, 0)))
    hi = _reduce(builder, _products(builder, _half(builder, w, 1), _half(builder, x, 1)))
    return lo, hi


def _check_bytes(*arrays) -> None:
    for arr in arrays:
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype.bitwidth == 8):
            raise TypeError(f"int8 dot intrinsics take 1-D 8-bit arrays, got {arr}")


# ---- each format's integers as <32 x i8>, from the leading (w, offsets..., shifts...) arguments -------------


def _q4_values(context, builder, sig, args):
    """(w, wo, ...): Q4_0/Q4_1/I4Z block, the low nibbles of w[wo:wo+16] then the high ones (0..15)."""
    pw = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    return _nibbles(builder, _load(builder, pw, 16))


def _q5_values(context, builder, sig, args):
    """(w, qso, qho, ...): Q5_0/Q5_1 block, the Q4 nibbles at qso plus bit j of the little-endian uint32 at
    qho as bit 4 of value j (0..31)."""
    ps = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    ph = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[2], args[2])
    qh = builder.load(builder.bitcast(ph, _I32.as_pointer()), align=1)
    # bitcast iN -> <N x i1> puts bit j in lane j (little-endian lane order)
    high = builder.zext(builder.bitcast(qh, _vec(ir.IntType(1), 32)), _vec(_I8, 32))
    return builder.or_(_nibbles(builder, _load(builder, ps, 16)), builder.shl(high, _splat(builder, 4, 32)))


def _q2_k_values(context, builder, sig, args):
    """(w, qo, shift, ...): Q2_K field, (w[qo + j] >> shift) & 3."""
    pq = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    shift = _splat_var(builder, _small_int(context, builder, sig.args[2], args[2]), 32)
    return builder.and_(builder.lshr(_load(builder, pq, 32), shift), _splat(builder, 3, 32))


def _q3_k_values(context, builder, sig, args):
    """(w, qo, shift, ho, bit, ...): Q3_K field, ((w[qo + j] >> shift) & 3) | ((w[ho + j] >> bit) & 1) << 2."""
    pq = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    ph = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[3], args[3])
    shift = _splat_var(builder, _small_int(context, builder, sig.args[2], args[2]), 32)
    bit = _splat_var(builder, _small_int(context, builder, sig.args[4], args[4]), 32)
    low = builder.and_(builder.lshr(_load(builder, pq, 32), shift), _splat(builder, 3, 32))
    high = builder.and_(builder.lshr(_load(builder, ph, 32), bit), _splat(builder, 1, 32))
    return builder.or_(low, builder.shl(high, _splat(builder, 2, 32)))


def _q6_k_values(context, builder, sig, args):
    """(w, qlo, qho, ql_shift, qh_shift, ...): Q6_K quarter,
    ((w[qlo + j] >> ql_shift) & 15) | (((w[qho + j] >> qh_shift) & 3) << 4)."""
    pl = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    ph = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[2], args[2])
    lshift = _splat_var(builder, _small_int(context, builder, sig.args[3], args[3]), 32)
    hshift = _splat_var(builder, _small_int(context, builder, sig.args[4], args[4]), 32)
    low = builder.and_(builder.lshr(_load(builder, pl, 32), lshift), _splat(builder, 15, 32))
    high = builder.and_(builder.lshr(_load(builder, ph, 32), hshift), _splat(builder, 3, 32))
    return builder.or_(low, builder.shl(high, _splat(builder, 4, 32)))


# ---- 32 whole bytes -----------------------------------------------------------------------------------


@intrinsic
def dot_u8(typingctx, w, wo, x, xo):
    """sum_{j<32} w[wo + j] (as 0..255) * x[xo + j] (as -128..127) -> int32."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        pw = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        px = _byte_ptr(context, builder, sig.args[2], args[2], sig.args[3], args[3])
        return _reduce(builder, _products(builder, _load(builder, pw, 32), _load(builder, px, 32)))

    return types.int32(w, wo, x, xo), codegen


@intrinsic
def dot_i8_biased(typingctx, w, wo, x, xo):
    """sum_{j<32} (int8(w[wo + j]) + 128) * x[xo + j]: Q8_0's signed weights made unsigned by flipping the
    sign bit, so the u8 x s8 instructions apply; the caller subtracts 128 * sum(x)."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        pw = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        px = _byte_ptr(context, builder, sig.args[2], args[2], sig.args[3], args[3])
        biased = builder.xor(_load(builder, pw, 32), _splat(builder, 128, 32))
        return _reduce(builder, _products(builder, biased, _load(builder, px, 32)))

    return types.int32(w, wo, x, xo), codegen


# ---- 4 and 5 bits, 32-value blocks ------------------------------------------------------------------------


@intrinsic
def dot_q4(typingctx, w, wo, x, xo):
    """Q4_0/Q4_1 block: q_j = low nibble of w[wo + j], q_{j+16} = its high nibble (0..15);
    sum_{j<32} q_j * x[xo + j] -> int32."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        q = _q4_values(context, builder, sig, args)
        px = _byte_ptr(context, builder, sig.args[2], args[2], sig.args[3], args[3])
        return _reduce(builder, _products(builder, q, _load(builder, px, 32)))

    return types.int32(w, wo, x, xo), codegen


@intrinsic
def dot_q5(typingctx, w, qso, qho, x, xo):
    """Q5_0/Q5_1 block: the Q4 nibbles at qso plus bit j of the little-endian uint32 at qho as bit 4 of
    q_j (0..31); sum_{j<32} q_j * x[xo + j] -> int32."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        q = _q5_values(context, builder, sig, args)
        px = _byte_ptr(context, builder, sig.args[3], args[3], sig.args[4], args[4])
        return _reduce(builder, _products(builder, q, _load(builder, px, 32)))

    return types.int32(w, qso, qho, x, xo), codegen


# ---- K-quant 32-byte chunks ------------------------------------------------------------------------------


def _q45_k_values(context, builder, sig, args, with_high: bool):
    """(low, high) <32 x i8> values of a Q4_K/Q5_K chunk: args (w, wo[, qho, c], ...)."""
    pw = _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    packed = _load(builder, pw, 32)
    lo = builder.and_(packed, _splat(builder, 15, 32))
    hi = builder.lshr(packed, _splat(builder, 4, 32))
    if with_high:  # bit 2c (low group) and 2c + 1 (high group) of qh[lane] is bit 4 of the value
        qh = _load(builder, _byte_ptr(context, builder, sig.args[0], args[0], sig.args[2], args[2]), 32)
        shift = _splat_var(builder, _small_int(context, builder, sig.args[3], args[3]), 32)
        bits = builder.lshr(qh, builder.add(shift, shift))
        one = _splat(builder, 1, 32)
        lo = builder.or_(lo, builder.shl(builder.and_(bits, one), _splat(builder, 4, 32)))
        hi = builder.or_(hi, builder.shl(builder.and_(builder.lshr(bits, one), one), _splat(builder, 4, 32)))
    return lo, hi


def _q45_k_chunk(context, builder, sig, args, with_high: bool):
    """Both group dots of a Q4_K/Q5_K chunk: low nibbles with x[xo:xo+32], high ones with x[xo+32:xo+64]."""
    lo, hi = _q45_k_values(context, builder, sig, args, with_high)
    px = _byte_ptr(context, builder, sig.args[-2], args[-2], sig.args[-1], args[-1])
    x0 = _load(builder, px, 32)
    x1 = _load(builder, builder.gep(px, [ir.Constant(_I32, 32)]), 32)
    dot0 = _reduce(builder, _products(builder, lo, x0))
    dot1 = _reduce(builder, _products(builder, hi, x1))
    return context.make_tuple(builder, _PAIR, [dot0, dot1])


@intrinsic
def dot_q4_k(typingctx, w, wo, x, xo):
    """Q4_K chunk of 32 bytes at wo: (sum_j lo_j x[xo + j], sum_j hi_j x[xo + 32 + j]), nibbles 0..15."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        return _q45_k_chunk(context, builder, sig, args, with_high=False)

    return _PAIR(w, wo, x, xo), codegen


@intrinsic
def dot_q5_k(typingctx, w, wo, qho, c, x, xo):
    """Q5_K chunk c (32 bytes at wo, high bits in the 32 bytes at qho): as dot_q4_k, with bit 2c / 2c + 1 of
    qh[j] as bit 4 of the low / high value j (0..31)."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        return _q45_k_chunk(context, builder, sig, args, with_high=True)

    return _PAIR(w, wo, qho, c, x, xo), codegen


@intrinsic
def dot_q2_k(typingctx, w, qo, shift, x, xo):
    """Q2_K field: q_j = (w[qo + j] >> shift) & 3; (sum_{j<16} q_j x[xo + j], sum_{16<=j<32} q_j x[xo + j]),
    one per 16-value scale group."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        q = _q2_k_values(context, builder, sig, args)
        px = _byte_ptr(context, builder, sig.args[3], args[3], sig.args[4], args[4])
        dot0, dot1 = _dot_halves(builder, q, _load(builder, px, 32))
        return context.make_tuple(builder, _PAIR, [dot0, dot1])

    return _PAIR(w, qo, shift, x, xo), codegen


@intrinsic
def dot_q3_k(typingctx, w, qo, shift, ho, bit, x, xo):
    """Q3_K field: q_j = ((w[qo + j] >> shift) & 3) | ((w[ho + j] >> bit) & 1) << 2, 0..7 (the format's
    value + 4); (sum_{j<16} q_j x[xo + j], sum_{16<=j<32} q_j x[xo + j]), one per 16-value scale group."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        q = _q3_k_values(context, builder, sig, args)
        px = _byte_ptr(context, builder, sig.args[5], args[5], sig.args[6], args[6])
        dot0, dot1 = _dot_halves(builder, q, _load(builder, px, 32))
        return context.make_tuple(builder, _PAIR, [dot0, dot1])

    return _PAIR(w, qo, shift, ho, bit, x, xo), codegen


@intrinsic
def dot_q6_k(typingctx, w, qlo, qho, ql_shift, qh_shift, x, xo):
    """Q6_K quarter: q_j = ((w[qlo + j] >> ql_shift) & 15) | (((w[qho + j] >> qh_shift) & 3) << 4), 0..63;
    (sum_{j<16} q_j x[xo + j], sum_{16<=j<32} q_j x[xo + j]), one per 16-value scale group."""
    _check_bytes(w, x)

    def codegen(context, builder, sig, args):
        q = _q6_k_values(context, builder, sig, args)
        px = _byte_ptr(context, builder, sig.args[5], args[5], sig.args[6], args[6])
        dot0, dot1 = _dot_halves(builder, q, _load(builder, px, 32))
        return context.make_tuple(builder, _PAIR, [dot0, dot1])

    return _PAIR(w, qlo, qho, ql_shift, qh_shift, x, xo), codegen


# ---- scalars ------------------------------------------------------------------------------------------


_HALF_ASM = "vmovd $1, $0\n\tvcvtph2ps $0, $0"  # half bits in a 32-bit register -> float32 in an xmm
# two 32-bit registers of two halves each -> the four as float32, in one conversion
_FOUR_HALVES_ASM = "vmovd $1, $0\n\tvpinsrd $$1, $2, $0, $0\n\tvcvtph2ps $0, $0"


@intrinsic
def f16_at(typingctx, w, wo):
    """The little-endian IEEE half at w[wo], as float32 (vcvtph2ps / fcvt instead of a table lookup; integer
    operations where the target has no half conversion, see cpu_target.NATIVE_HALF)."""
    _check_bytes(w)

    def codegen(context, builder, sig, args):
        return half_to_float(builder, _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1]))

    return types.float32(w, wo), codegen


def half_to_float(builder, ptr):
    """float32 of the little-endian half at byte pointer `ptr`."""
    half = builder.load(builder.bitcast(ptr, ir.IntType(16).as_pointer()), align=1)
    if NATIVE_HALF and X86:
        # LLVM loads a lone half with vpinsrw into whatever register it picks, so the conversion waited
        # on that register's last writer: in the lane dots, the previous row's accumulator, which
        # chained the rows together (15 cycles a Q4_1 block on a Zen 1; 7-9% of SmolLM2's decode).
        # vmovd from a general register writes all of its destination: no false dependency.
        convert = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [_I32]), _HALF_ASM, "=x,r")
        return builder.call(convert, [builder.zext(half, _I32)])
    if NATIVE_HALF:
        return builder.fpext(builder.bitcast(half, ir.HalfType()), ir.FloatType())
    return _half_bits_to_float(builder, builder.zext(half, _I32))


def four_halves(builder, ptr0, ptr1):
    """<4 x float> of the halves at ptr0, ptr0 + 2, ptr1, ptr1 + 2 (two blocks' leading scale pairs) in one
    conversion where the target has F16C, else one at a time."""
    if NATIVE_HALF and X86:
        lo, hi = (builder.load(builder.bitcast(p, _I32.as_pointer()), align=1) for p in (ptr0, ptr1))
        convert = ir.InlineAsm(
            ir.FunctionType(_vec(ir.FloatType(), 4), [_I32, _I32]), _FOUR_HALVES_ASM, "=&x,r,r"
        )
        return builder.call(convert, [lo, hi])
    four = ir.Constant(_vec(ir.FloatType(), 4), None)
    for i, (p, at) in enumerate(((ptr0, 0), (ptr0, 2), (ptr1, 0), (ptr1, 2))):
        value = half_to_float(builder, builder.gep(p, [ir.Constant(_I32, at)]))
        four = builder.insert_element(four, value, ir.Constant(_I32, i))
    return four


def _half_bits_to_float(builder, bits):
    """i32 holding half bits -> float, exactly: the half's exponent and mantissa moved into a float's fields
    read as 2^-112 times the value (subnormal halves as float subnormals), times 2^112; inf and NaN keep
    an all-ones exponent; the sign goes back last."""
    f32, i32 = ir.FloatType(), _I32
    magnitude = builder.and_(bits, ir.Constant(i32, 0x7FFF))
    moved = builder.shl(magnitude, ir.Constant(i32, 13))
    scaled = builder.fmul(builder.bitcast(moved, f32), ir.Constant(f32, 2.0**112))
    special = builder.or_(moved, ir.Constant(i32, 0x7F800000))  # inf / NaN with its payload
    is_special = builder.icmp_unsigned(">=", magnitude, ir.Constant(i32, 0x7C00))
    out = builder.select(is_special, special, builder.bitcast(scaled, i32))
    sign = builder.shl(builder.and_(bits, ir.Constant(i32, 0x8000)), ir.Constant(i32, 16))
    return builder.bitcast(builder.or_(out, sign), f32)


@intrinsic
def prefetch(typingctx, w, wo):
    """Hint the CPU to bring the cache line of w[wo] into L1; an address past the end of w is harmless."""
    _check_bytes(w)

    def codegen(context, builder, sig, args):
        prefetch_line(builder, _byte_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1]))
        return context.get_dummy_value()

    return types.none(w, wo), codegen


def prefetch_line(builder, ptr):
    """The prefetch hint for the cache line of byte pointer `ptr` (read, keep in all levels)."""
    fnty = ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
    builder.call(fn, [ptr, ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


# ---- unpacking: each format's integers stored as bytes (blazr.quant.cpu_unpack) -----------------------------


def _store(context, builder, sig, args, vec, extra: int = 0):
    """Store vec at q[qo + extra], (q, qo) being the last two arguments."""
    ptr = _byte_ptr(context, builder, sig.args[-2], args[-2], sig.args[-1], args[-1])
    if extra:
        ptr = builder.gep(ptr, [ir.Constant(_I32, extra)])
    builder.store(vec, builder.bitcast(ptr, vec.type.as_pointer()), align=1)
    return context.get_dummy_value()


@intrinsic
def unpack_q4(typingctx, w, wo, q, qo):
    """q[qo:qo+32] = the Q4_0/Q4_1/I4Z block's 4-bit integers from w[wo:wo+16] (dot_q4's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        return _store(context, builder, sig, args, _q4_values(context, builder, sig, args))

    return types.none(w, wo, q, qo), codegen


@intrinsic
def unpack_q5(typingctx, w, qso, qho, q, qo):
    """q[qo:qo+32] = the Q5_0/Q5_1 block's 5-bit integers (dot_q5's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        return _store(context, builder, sig, args, _q5_values(context, builder, sig, args))

    return types.none(w, qso, qho, q, qo), codegen


@intrinsic
def unpack_q4_k(typingctx, w, wo, q, qo):
    """q[qo:qo+64] = a Q4_K chunk's low nibbles, then its high ones (dot_q4_k's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        lo, hi = _q45_k_values(context, builder, sig, args, with_high=False)
        _store(context, builder, sig, args, lo)
        return _store(context, builder, sig, args, hi, 32)

    return types.none(w, wo, q, qo), codegen


@intrinsic
def unpack_q5_k(typingctx, w, wo, qho, c, q, qo):
    """q[qo:qo+64] = Q5_K chunk c's 5-bit integers, low group then high group (dot_q5_k's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        lo, hi = _q45_k_values(context, builder, sig, args, with_high=True)
        _store(context, builder, sig, args, lo)
        return _store(context, builder, sig, args, hi, 32)

    return types.none(w, wo, qho, c, q, qo), codegen


@intrinsic
def unpack_q2_k(typingctx, w, qo_, shift, q, qo):
    """q[qo:qo+32] = a Q2_K field's 2-bit integers (dot_q2_k's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        return _store(context, builder, sig, args, _q2_k_values(context, builder, sig, args))

    return types.none(w, qo_, shift, q, qo), codegen


@intrinsic
def unpack_q3_k(typingctx, w, qo_, shift, ho, bit, q, qo):
    """q[qo:qo+32] = a Q3_K field's 3-bit integers, the format's value + 4 (dot_q3_k's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        return _store(context, builder, sig, args, _q3_k_values(context, builder, sig, args))

    return types.none(w, qo_, shift, ho, bit, q, qo), codegen


@intrinsic
def unpack_q6_k(typingctx, w, qlo, qho, ql_shift, qh_shift, q, qo):
    """q[qo:qo+32] = a Q6_K quarter's 6-bit integers, the format's value + 32 (dot_q6_k's values)."""
    _check_bytes(w, q)

    def codegen(context, builder, sig, args):
        return _store(context, builder, sig, args, _q6_k_values(context, builder, sig, args))

    return types.none(w, qlo, qho, ql_shift, qh_shift, q, qo), codegen
