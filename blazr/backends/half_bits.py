"""float16 in numba kernels on the CPU, as uint16 bits: numba has no float16 type there, so a float16 array
reaches a kernel as `array.view(np.uint16)` and each element is widened to float32 where it is loaded.

`widen(x)` is the identity on a float and, on uint16 bits, the float32 of that float16. It rebuilds the bits
rather than calling LLVM's half -> float conversion: that needs F16C (absent at the generic ISA level, where
LLVM calls a runtime helper numba's JIT does not link), while shifts, a bit cast and a multiply vectorise on
every x86 level. Exact for every finite float16, subnormals and signed zeros included; inf and NaN are not
decoded (the KV cache writes none: its values are clipped to the float16 range).

`narrow(x)` is the other way, float32 -> float16 bits, exactly as blazr.backends.base.to_half (numpy's
rounding to nearest even after saturating at +-65504; NaN stays NaN): the KV write rounds inside its kernel
rather than in four numpy passes per layer and decode step (~25 us of SmolLM2's ~30 layers' each).
blazr.backends.base.as_half_bits makes the uint16 views.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from blazr.backends.base import HALF_MAX
from blazr.numba_bits import bits_from_float32, float32_from_bits

_TWO_POW_112 = np.float32(2.0**112)  # float16's exponent bias (15) to float32's (127)


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
            return float32_from_bits(bits) * _TWO_POW_112

        return half
    return None


_HALF_MAX = np.float32(HALF_MAX)


def narrow(x):
    """float16 bits (uint16) of float32 `x`, as to_half rounds it (numba only)."""
    raise NotImplementedError("narrow runs inside numba kernels only")


@overload(narrow, inline="always")
def _narrow(x):
    if x != types.float32:
        return None

    def half(x):
        # numpy's npy_floatbits_to_halfbits with ties to even, after to_half's clip (NaN passes the clip)
        if x > _HALF_MAX:
            x = _HALF_MAX
        elif x < -_HALF_MAX:
            x = -_HALF_MAX
        f = bits_from_float32(x)
        sign = (f >> np.uint32(16)) & np.uint32(0x8000)
        exp = f & np.uint32(0x7F800000)
        if exp == np.uint32(0x7F800000):  # NaN (inf was clipped): the top 10 payload bits, kept a NaN
            payload = np.uint32(0x7C00) + ((f & np.uint32(0x007FFFFF)) >> np.uint32(13))
            return np.uint16(sign | (payload + np.uint32(payload == np.uint32(0x7C00))))
        if exp <= np.uint32(0x38000000):  # a float16 subnormal, or zero
            if exp < np.uint32(0x33000000):
                return np.uint16(sign)
            sig = (np.uint32(0x00800000) + (f & np.uint32(0x007FFFFF))) >> (
                np.uint32(113) - (exp >> np.uint32(23))
            )
            if (sig & np.uint32(0x3FFF)) != np.uint32(0x1000) or (f & np.uint32(0x7FF)) != 0:
                sig += np.uint32(0x1000)
            return np.uint16(sign | (sig >> np.uint32(13)))
        sig = f & np.uint32(0x007FFFFF)
        if (sig & np.uint32(0x3FFF)) != np.uint32(0x1000):
            sig += np.uint32(0x1000)
        # a carry out of the significand moves into the exponent, as in numpy
        return np.uint16(sign | (((exp - np.uint32(0x38000000)) >> np.uint32(13)) + (sig >> np.uint32(13))))

    return half


def to_cache(cache, x):
    """float32 `x` as an element of `cache` stores it: narrow(x) for a float16 cache's uint16 bits, else x
    (numba only)."""
    raise NotImplementedError("to_cache runs inside numba kernels only")


@overload(to_cache, inline="always")
def _to_cache(cache, x):
    if isinstance(cache, types.Array) and cache.dtype == types.uint16 and x == types.float32:
        return lambda cache, x: narrow(x)
    return lambda cache, x: x
