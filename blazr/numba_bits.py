"""Bit casts between float32 and uint32 inside numba kernels: numba has no scalar `view`, and these are plain
LLVM bit casts, so a loop that uses them still vectorises (the float16 widening and narrowing in
blazr.backends.half_bits, the int8 activations' absmax in blazr.quant.cpu_int8_dots)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def float32_from_bits(typingctx, bits):
    """The float32 whose IEEE 754 bits are `bits` (uint32): a bit cast, no conversion."""
    if bits != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@intrinsic
def bits_from_float32(typingctx, x):
    """The IEEE 754 bits (uint32) of float32 `x`: a bit cast, no conversion."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen
