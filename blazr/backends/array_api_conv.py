"""The convolutions of backends/base.py written against an array module `xp` (a mixin of ArrayAPIBackend):
conv1d (grouped, strided, dilated) and conv_transpose1d, each a few BLAS products instead of a loop over time.
"""

from __future__ import annotations

from blazr.backends.base import Array


class ConvOps:
    """Needs self.xp (the array module)."""

    def conv1d(
        self, x: Array, w: Array, b: Array | None, stride: int, pad: int, groups: int, dilation: int = 1
    ) -> Array:
        xp = self.xp
        c_in, length = x.shape
        c_out, c_per_group, kw = w.shape
        l_out = (length + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
        xpad = xp.pad(x, ((0, 0), (pad, pad)))  # (C_in, L + 2pad)
        span = stride * (l_out - 1) + 1  # padded columns from a tap's first to its last read
        if c_per_group == 1 and c_out == groups:  # depthwise: one multiply-add per tap, no tiny matmuls
            out = xp.zeros((c_out, l_out), dtype=x.dtype)  # (C, L_out)
            for j in range(kw):
                out += w[:, :, j] * xpad[:, j * dilation : j * dilation + span : stride]
        else:
            xg = xpad.reshape(groups, c_in // groups, -1)  # (g, C_in/g, L + 2pad)
            wg = w.reshape(groups, c_out // groups, c_per_group, kw)  # (g, C_out/g, C_in/g, Kw)
            out = xp.zeros((groups, c_out // groups, l_out), dtype=x.dtype)  # (g, C_out/g, L_out)
            # One batched matmul per tap: tap j reads padded columns j * dilation, + stride, ...
            for j in range(kw):
                out += xp.matmul(wg[..., j], xg[:, :, j * dilation : j * dilation + span : stride])
            out = out.reshape(c_out, l_out)
        if b is not None:
            out += b[:, None]
        return out

    def conv_transpose1d(
        self, x: Array, w: Array, b: Array | None, stride: int, pad: int, groups: int = 1
    ) -> Array:
        xp = self.xp
        c_in, length = x.shape
        _, per_out, kw = w.shape  # (C_in, C_out/g, Kw)
        c_out = per_out * groups
        l_full = (length - 1) * stride + kw  # before dropping `pad` columns each side
        # every tap of every input column in one (batched) matmul: (g, C_out/g * Kw, L)
        wg = w.reshape(groups, c_in // groups, per_out * kw)
        taps = xp.matmul(wg.transpose(0, 2, 1), x.reshape(groups, c_in // groups, length))
        taps = taps.reshape(c_out, kw, length)
        full = xp.zeros((c_out, l_full), dtype=x.dtype)  # (C_out, L_full)
        # overlap-add: tap j of input column t lands on column t * stride + j
        for j in range(kw):
            full[:, j : j + stride * (length - 1) + 1 : stride] += taps[:, j]
        out = full if pad == 0 else xp.ascontiguousarray(full[:, pad : l_full - pad])  # (C_out, L_out)
        if b is not None:
            out += b[:, None]
        return out
