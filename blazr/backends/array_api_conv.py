"""The convolutions of backends/base.py written against an array module `xp` (a mixin of ArrayAPIBackend):
conv1d (grouped, strided, dilated) and conv_transpose1d, each a few BLAS products instead of a loop over time.
"""

from __future__ import annotations

from blazr.backends.base import Array

_IM2COL_ELEMENTS = 1 << 19  # floats in one im2col block (2 MiB in float32): within a core's L2 or the L3


class ConvOps:
    """Needs self.xp (the array module)."""

    def conv1d(
        self,
        x: Array,
        w: Array,
        b: Array | None,
        stride: int,
        pad: int,
        groups: int,
        dilation: int = 1,
        pre_act: str | None = None,
        slope: float = 0.01,
        residual: Array | None = None,
    ) -> Array:
        xp = self.xp
        c_in, length = x.shape
        c_out, c_per_group, kw = w.shape
        l_out = (length + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
        if groups == 1:  # act and residual fused into the blocks (_conv1d_dense)
            out = self._conv1d_dense(x, w, stride, pad, dilation, l_out, pre_act, slope, residual)
            if b is not None:
                out += b[:, None]
            return out
        if pre_act is not None:
            x = self.act(x, pre_act, slope=slope)
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
        if residual is not None:
            out += residual
        return out

    def _conv1d_dense(
        self,
        x: Array,
        w: Array,
        stride: int,
        pad: int,
        dilation: int,
        l_out: int,
        pre_act: str | None,
        slope: float,
        residual: Array | None,
    ) -> Array:
        """Ungrouped conv1d as GEMMs over blocks of output columns: each block's taps gathered into one
        (Kw * C_in, n) matrix (im2col) that stays in cache, times the weights as (C_out, Kw * C_in). One
        product with K = Kw * C_in per block keeps the BLAS busy, where a product per tap (K = C_in, often
        32-128) is bound by memory traffic, reading the input and the output once for every tap. The input
        activation is written straight into the padded copy the gather reads (one pass for both), and the
        residual is added to each block's product while it is in cache."""
        xp = self.xp
        c_out, c_in, kw = w.shape
        length = x.shape[1]
        xpad = xp.empty((c_in, length + 2 * pad), dtype=x.dtype)  # (C_in, L + 2pad): act(x), zero-padded
        xpad[:, :pad] = 0
        xpad[:, pad + length :] = 0
        inner = xpad[:, pad : pad + length]
        if pre_act == "leaky_relu" and 0 <= slope <= 1:
            xp.multiply(x, xp.asarray(slope, dtype=x.dtype), out=inner)
            xp.maximum(inner, x, out=inner)
        elif pre_act is not None:
            inner[...] = self.act(x, pre_act, slope=slope)
        else:
            inner[...] = x
        w2 = xp.ascontiguousarray(w.transpose(0, 2, 1)).reshape(c_out, kw * c_in)  # rows (tap, C_in)
        out = xp.empty((c_out, l_out), dtype=x.dtype)  # (C_out, L_out)
        block = max(256, _IM2COL_ELEMENTS // (kw * c_in))  # output columns per block
        col = xp.empty((kw, c_in, min(block, l_out)), dtype=x.dtype)  # (Kw, C_in, n)
        for start in range(0, l_out, block):
            n = min(block, l_out - start)
            for j in range(kw):
                first = start * stride + j * dilation
                col[j, :, :n] = xpad[:, first : first + stride * (n - 1) + 1 : stride]
            product = xp.matmul(w2, col[:, :, :n].reshape(kw * c_in, n))  # (C_out, n)
            if residual is not None:
                product += residual[:, start : start + n]
            out[:, start : start + n] = product
        return out

    def conv_transpose1d(
        self,
        x: Array,
        w: Array,
        b: Array | None,
        stride: int,
        pad: int,
        groups: int = 1,
        pre_act: str | None = None,
        slope: float = 0.01,
    ) -> Array:
        xp = self.xp
        if pre_act is not None:
            x = self.act(x, pre_act, slope=slope)
        c_in, length = x.shape
        _, per_out, kw = w.shape  # (C_in, C_out/g, Kw)
        c_out = per_out * groups
        if groups == 1 and stride > 1:
            out = self._conv_transpose1d_phases(x, w, stride, pad)
            if b is not None:
                out += b[:, None]
            return out
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

    def _conv_transpose1d_phases(self, x: Array, w: Array, stride: int, pad: int) -> Array:
        """Ungrouped conv_transpose1d as one GEMM over its `stride` output phases: output column
        u * stride + r sums taps j = q * stride + r of input columns u - q, so with the input shifted by
        q = 0..m-1 stacked (m * C_in rows) every phase is an ordinary product; the phases are then
        interleaved by one copy. No overlap-add passes over the output."""
        xp = self.xp
        c_in, length = x.shape
        _, c_out, kw = w.shape  # (C_in, C_out, Kw)
        m = -(-kw // stride)  # taps per phase
        wpad = xp.zeros((c_in, c_out, m * stride), dtype=w.dtype)
        wpad[:, :, :kw] = w
        # (stride * C_out, m * C_in): row (r, co), column (q, ci) = w[ci, co, q * stride + r]
        w2 = xp.ascontiguousarray(wpad.reshape(c_in, c_out, m, stride).transpose(3, 1, 2, 0))
        w2 = w2.reshape(stride * c_out, m * c_in)
        cols = length + m - 1
        col = xp.zeros((m, c_in, cols), dtype=x.dtype)  # (m, C_in, L + m - 1): input shifted by q
        for q in range(m):
            col[q, :, q : q + length] = x
        phases = xp.matmul(w2, col.reshape(m * c_in, cols)).reshape(stride, c_out, cols)
        full = xp.ascontiguousarray(phases.transpose(1, 2, 0)).reshape(c_out, cols * stride)
        l_full = (length - 1) * stride + kw
        return xp.ascontiguousarray(full[:, pad : l_full - pad])  # (C_out, L_out)
