"""float16 in numba kernels on the CPU, as uint16 bits: numba has no float16 type there, so a float16 array
reaches a kernel as `array.view(np.uint16)` and each element is widened to float32 where it is loaded.

`widen(x)` is the identity on a float and, on uint16 bits, the float32 of that float16. It rebuilds the bits
rather than calling LLVM's half -> float conversion: that needs F16C (absent at the generic ISA level, where
LLVM calls a runtime helper numba's JIT does not link), while shifts, a bit cast and a multiply vectorise on
every x86 level. Exact for every finite float16, subnormals and signed zeros included; inf and NaN are not
decoded (the KV cache writes none: its values are clipped to the float16 range).

The other way is numpy's (blazr.backends.base.to_half: round to nearest even, saturating at +-65504), and
blazr.backends.base.as_half_bits makes the uint16 views.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

_TWO_POW_112 = np.float32(2.0**112)  # float16's exponent bias (15) to float32's (127)


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE 754 bits are `bits` (uint32): a bit cast, no conversion."""
    if bits != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


def widen(x):
    """float32 of a cache element: a float as it is, uint16 bits as the float16 they hold (numba only)."""
    raise NotImplementedError("widen runs inside numba kernels only")


@overload(widen, inline="always")
def _widen(x):
    if isinstance(x, types.Float):
        return lambda x: x
    if x == types.uint16:

        def half(x):
            h = np.uint32(x)
            # sign to bit 31; exponent and mantissa to float32's places, still in float16's bias: the
            # multiply by 2^112 rebiases them, which also turns a float16 subnormal into a float32 normal
            bits = np.uint32(
                ((h & np.uint32(0x8000)) << np.uint32(16)) | ((h & np.uint32(0x7FFF)) << np.uint32(13))
            )
            return _float32_from_bits(bits) * _TWO_POW_112

        return half
    return None
