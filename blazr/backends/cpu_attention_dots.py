"""The query-key dot products of the paged attention kernels (blazr.backends.cpu_attention), summed in an order
fixed by this code, not chosen by LLVM.

Why: a decode step attends on the serial kernel or, with many sequences, on the parallel one, and a query's
output must be the same bits on both (batch invariance). Both run the same source (`_attend`), but numba
compiles it into each caller, and with fast-math's `reassoc` LLVM was free to sum each dot product in another
order in each: its Reassociate pass ranks operands by where they are defined in the whole function, so the
same loop inlined into two functions can be summed two ways. On a Zen 4 EPYC (AVX-512) the two kernels then
differed in the last bits for 80-wide heads, depending on which kernel variants the process had compiled
before (tests/test_batching_invariants.py failed in CI, passed alone). Here the sums are written out as
vector operations: no reassociation is allowed, so every compilation of them adds in the same order.

    dot_rows4(q, k0, k1, k2, k3) -> (q . k0, q . k1, q . k2, q . k3)      dot_row(q, k) -> q . k

q (Dh,) float32; each k (>= Dh,) float32, or uint16 float16 bits widened exactly as blazr.backends.half_bits
widens them; all 1-D and contiguous. Each sum: LANES partial sums over the 16-value steps (a multiply-add each,
fused where the CPU has FMA), added lane by lane in a fixed tree (8 + 8, 4 + 4, 2 + 2, 1 + 1), then the
Dh % 16 last products one by one.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16  # one 512-bit vector of float32 (two AVX ones on a CPU without AVX-512: LLVM splits them)
_F32, _I16, _I32, _I64 = ir.FloatType(), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_FLAGS = ("contract",)  # a multiply and its add may fuse (as numba's fastmath), nothing may reorder


def _const(elem: ir.Type, n: int | None, value) -> ir.Constant:
    """`value` as an `elem` constant, in every lane of an n-vector (n None: a scalar)."""
    return ir.Constant(ir.VectorType(elem, n), [value] * n) if n else ir.Constant(elem, value)


def _widen(builder, raw, dtype):
    """float32 (vector or scalar) of loaded key elements: float32 as they are; uint16 float16 bits as
    half_bits.widen makes them: sign to bit 31, exponent and mantissa shifted to float32's places, times 2^112."""
    if dtype == types.float32:
        return raw
    n = raw.type.count if isinstance(raw.type, ir.VectorType) else None
    h = builder.zext(raw, ir.VectorType(_I32, n) if n else _I32)
    sign = builder.shl(builder.and_(h, _const(_I32, n, 0x8000)), _const(_I32, n, 16))
    rest = builder.shl(builder.and_(h, _const(_I32, n, 0x7FFF)), _const(_I32, n, 13))
    value = builder.bitcast(builder.or_(sign, rest), ir.VectorType(_F32, n) if n else _F32)
    return builder.fmul(value, _const(_F32, n, 2.0**112))


def _lanes(indices) -> ir.Constant:
    """A shuffle mask picking these lanes."""
    indices = list(indices)
    return ir.Constant(ir.VectorType(_I32, len(indices)), indices)


def _check(q, keys) -> None:
    if not (isinstance(q, types.Array) and q.ndim == 1 and q.dtype == types.float32 and q.layout == "C"):
        raise TypeError(f"the attention dots take a 1-D contiguous float32 query, got {q}")
    for k in keys:
        ok = isinstance(k, types.Array) and k.ndim == 1 and k.layout == "C"
        if not (ok and k.dtype in (types.float32, types.uint16) and k.dtype == keys[0].dtype):
            raise TypeError(f"the attention dots take 1-D contiguous float32 or uint16 key rows, got {k}")


def _dots(context, builder, sig, args):
    """[q . k for each key row] as float32 values, in this module's order."""
    q_ty, key_tys = sig.args[0], sig.args[1:]
    q_arr = context.make_array(q_ty)(context, builder, args[0])
    n = builder.extract_value(q_arr.shape, 0)
    dtype = key_tys[0].dtype
    elem = _F32 if dtype == types.float32 else _I16  # a key element as loaded
    keys = [context.make_array(t)(context, builder, a).data for t, a in zip(key_tys, args[1:], strict=True)]
    fvec = ir.VectorType(_F32, LANES)
    cells = [cgutils.alloca_once_value(builder, ir.Constant(fvec, None)) for _ in keys]
    steps = builder.udiv(n, ir.Constant(_I64, LANES))
    with cgutils.for_range(builder, steps) as loop:
        i = builder.mul(loop.index, ir.Constant(_I64, LANES))
        qv = builder.load(builder.bitcast(builder.gep(q_arr.data, [i]), fvec.as_pointer()), align=4)
        for cell, data in zip(cells, keys, strict=True):
            raw = builder.load(builder.bitcast(builder.gep(data, [i]), ir.VectorType(elem, LANES).as_pointer()),
                               align=4 if dtype == types.float32 else 2)  # fmt: skip
            product = builder.fmul(qv, _widen(builder, raw, dtype), flags=_FLAGS)
            builder.store(builder.fadd(builder.load(cell), product, flags=_FLAGS), cell)
    sums = []
    for cell in cells:  # the lanes' tree: 8 + 8, 4 + 4, 2 + 2, 1 + 1
        v = builder.load(cell)
        width = LANES
        while width > 1:
            width //= 2
            lo = builder.shuffle_vector(v, v, _lanes(range(width)))
            v = builder.fadd(lo, builder.shuffle_vector(v, v, _lanes(range(width, 2 * width))))
        sums.append(cgutils.alloca_once_value(builder, builder.extract_element(v, ir.Constant(_I32, 0))))
    with cgutils.for_range(builder, builder.sub(n, builder.mul(steps, ir.Constant(_I64, LANES)))) as loop:
        i = builder.add(builder.mul(steps, ir.Constant(_I64, LANES)), loop.index)
        qi = builder.load(builder.gep(q_arr.data, [i]))
        for total, data in zip(sums, keys, strict=True):
            ki = _widen(builder, builder.load(builder.gep(data, [i])), dtype)
            product = builder.fmul(qi, ki, flags=_FLAGS)
            builder.store(builder.fadd(builder.load(total), product, flags=_FLAGS), total)
    return [builder.load(total) for total in sums]


@intrinsic
def dot_rows4(typingctx, q, k0, k1, k2, k3):
    """(q . k0, q . k1, q . k2, q . k3) as float32, in this module's order."""
    _check(q, (k0, k1, k2, k3))
    result = types.UniTuple(types.float32, 4)

    def codegen(context, builder, sig, args):
        return context.make_tuple(builder, result, _dots(context, builder, sig, args))

    return result(q, k0, k1, k2, k3), codegen


@intrinsic
def dot_row(typingctx, q, k):
    """q . k as float32, in this module's order."""
    _check(q, (k,))

    def codegen(context, builder, sig, args):
        return _dots(context, builder, sig, args)[0]

    return types.float32(q, k), codegen
