"""ggml's K-quant quantizers (Q4_K, Q5_K, Q6_K) for `blazr convert`, as llama-quantize runs them without an
importance matrix (ggml-quants.c's quantize_row_q*_K_ref).

The `gguf` package reads these formats but cannot write them. Each 256-value super-block is quantized on its
own: Q4_K / Q5_K fit a scale and a minimum to each 32-value sub-block by ggml's weighted search
(make_qkx2_quants: 20 or 15 candidate scales around the min-max one, weights |x| + rms), then quantize the
sub-block scales and minimums to 6 bits against the super-block's largest; Q6_K fits a signed scale per
16-value sub-block (make_qx_quants, weights x²) and stores it as int8 against the largest. Every step runs in
float32 in ggml's order of operations and rounds half to even as its nearest_int does, so the bytes equal
ggml's (tests/test_k_quants.py checks them against output of ggml's own functions). fp16 scales are rounded
inside the kernel because the later steps read them back rounded.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)

QK_K = 256
BLOCK_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
f32 = np.float32
GROUP_MAX_EPS = f32(1e-15)


@numba.njit(cache=True, inline="always")
def _nearest(x):
    """ggml's nearest_int: round half to even (its float32 magic-number trick, |x| < 2^22)."""
    return int(np.rint(x))


@numba.njit(cache=True)
def _fp16(x):
    """x rounded to the nearest float16 (ties to even) and back: GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(x))."""
    if x == 0 or not math.isfinite(x):
        return f32(x)
    exponent = math.frexp(float(x))[1] - 1
    ulp = math.ldexp(
        1.0, max(exponent, -14) - 10
    )  # float16 keeps 11 significant bits, subnormals below 2^-14
    rounded = np.rint(float(x) / ulp) * ulp
    return f32(rounded) if abs(rounded) <= 65504.0 else f32(math.copysign(math.inf, rounded))


@numba.njit(cache=True)
def _qkx2(x, w, nmax, rmin, rdelta, nstep, L, Laux):
    """make_qkx2_quants: L (n,) in [0, nmax] with x ~ scale * L - the_min; returns (scale, the_min)."""
    n = x.shape[0]
    lo, hi = x[0], x[0]
    sum_w = w[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < lo:
            lo = x[i]
        if x[i] > hi:
            hi = x[i]
        sum_w += w[i]
        sum_x += w[i] * x[i]
    if lo > 0:
        lo = f32(0)
    if hi == lo:
        L[:] = 0
        return f32(0), -lo
    fmax = f32(nmax)
    iscale = fmax / (hi - lo)
    scale = f32(1) / iscale
    best = f32(0)
    for i in range(n):
        L[i] = max(0, min(nmax, _nearest(iscale * (x[i] - lo))))
        diff = scale * f32(L[i]) + lo - x[i]
        diff = diff * diff
        best += w[i] * diff
    for step in range(nstep + 1):
        iscale = (rmin + rdelta * f32(step) + fmax) / (hi - lo)
        sum_l, sum_l2, sum_xl = f32(0), f32(0), f32(0)
        for i in range(n):
            q = max(0, min(nmax, _nearest(iscale * (x[i] - lo))))
            Laux[i] = q
            lq = f32(q)
            sum_l += w[i] * lq
            sum_l2 += w[i] * lq * lq
            sum_xl += w[i] * lq * x[i]
        det = sum_w * sum_l2 - sum_l * sum_l
        if det > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            if this_min > 0:
                this_min = f32(0)
                this_scale = sum_xl / sum_l2
            err = f32(0)
            for i in range(n):
                diff = this_scale * f32(Laux[i]) + this_min - x[i]
                diff = diff * diff
                err += w[i] * diff
            if err < best:
                L[:] = Laux
                best = err
                scale = this_scale
                lo = this_min
    return scale, -lo


@numba.njit(cache=True)
def _scale_min_k4(j, packed):
    if j < 4:
        return packed[j] & 63, packed[j + 4] & 63
    return (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4), (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4)


@numba.njit(cache=True)
def _scale_min_block(x, nmax, rmin, nstep, L, packed):
    """The Q4_K / Q5_K shared part: sub-block fits, 6-bit scales and minimums packed in ggml's 12 bytes, the
    fp16 super-block scale and minimum, then L (256,) requantized against the stored scales."""
    w = np.empty(32, np.float32)
    Laux = np.empty(32, np.uint8)
    scales = np.empty(8, np.float32)
    mins = np.empty(8, np.float32)
    max_scale, max_min = f32(0), f32(0)
    for j in range(8):
        sub = x[32 * j : 32 * j + 32]
        sum_x2 = f32(0)
        for i in range(32):
            sum_x2 += sub[i] * sub[i]
        av_x = np.sqrt(sum_x2 / f32(32))
        for i in range(32):
            w[i] = av_x + abs(sub[i])
        scales[j], mins[j] = _qkx2(sub, w, nmax, rmin, f32(0.1), nstep, L[32 * j : 32 * j + 32], Laux)
        if scales[j] > max_scale:
            max_scale = scales[j]
        if mins[j] > max_min:
            max_min = mins[j]
    inv_scale = f32(63) / max_scale if max_scale > 0 else f32(0)
    inv_min = f32(63) / max_min if max_min > 0 else f32(0)
    packed[:] = 0
    for j in range(8):
        ls = min(63, _nearest(inv_scale * scales[j]) & 0xFF)
        lm = min(63, _nearest(inv_min * mins[j]) & 0xFF)
        if j < 4:
            packed[j] = ls
            packed[j + 4] = lm
        else:
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            packed[j - 4] |= (ls >> 4) << 6
            packed[j] |= (lm >> 4) << 6
    d = _fp16(max_scale / f32(63))
    dmin = _fp16(max_min / f32(63))
    for j in range(8):
        sc, m = _scale_min_k4(j, packed)
        dj = d * f32(sc)
        if dj == 0:
            continue
        dm = dmin * f32(m)
        for i in range(32):
            L[32 * j + i] = max(0, min(nmax, _nearest((x[32 * j + i] + dm) / dj)))
    return d, dmin


@numba.njit(cache=True, parallel=True)
def _q4_k(x, d, dmin, scales, qs):
    """x (blocks, 256) float32 -> d, dmin (blocks,) float32 (fp16 values), scales (blocks, 12), qs (blocks, 128)."""
    for b in numba.prange(x.shape[0]):
        L = np.empty(QK_K, np.uint8)
        d[b], dmin[b] = _scale_min_block(x[b], 15, f32(-1), 20, L, scales[b])
        for j in range(0, QK_K, 64):
            for i in range(32):
                qs[b, j // 2 + i] = L[j + i] | (L[j + i + 32] << 4)


@numba.njit(cache=True, parallel=True)
def _q5_k(x, d, dmin, scales, qh, qs):
    """As _q4_k with 5-bit values: the low nibbles in qs (blocks, 128), the fifth bits in qh (blocks, 32)."""
    for b in numba.prange(x.shape[0]):
        L = np.empty(QK_K, np.uint8)
        d[b], dmin[b] = _scale_min_block(x[b], 31, f32(-0.5), 15, L, scales[b])
        qh[b, :] = 0
        m1, m2 = 1, 2
        for n in range(0, QK_K, 64):
            for j in range(32):
                l1, l2 = L[n + j], L[n + j + 32]
                if l1 > 15:
                    l1 -= 16
                    qh[b, j] |= m1
                if l2 > 15:
                    l2 -= 16
                    qh[b, j] |= m2
                qs[b, n // 2 + j] = l1 | (l2 << 4)
            m1 <<= 2
            m2 <<= 2


@numba.njit(cache=True)
def _qx(x, nmax, L):
    """make_qx_quants with rmse_type 1 and no importance: L in [0, 2 nmax) with x ~ scale * (L - nmax)."""
    n = x.shape[0]
    vmax, amax = f32(0), f32(0)
    for i in range(n):
        if abs(x[i]) > amax:
            amax = abs(x[i])
            vmax = x[i]
    if amax < GROUP_MAX_EPS:
        L[:] = 0
        return f32(0)
    fmax = f32(nmax)
    iscale = -fmax / vmax
    sumlx, suml2 = f32(0), f32(0)
    for i in range(n):
        q = max(-nmax, min(nmax - 1, _nearest(iscale * x[i])))
        L[i] = q + nmax
        w = x[i] * x[i]
        sumlx += w * x[i] * f32(q)
        suml2 += w * f32(q) * f32(q)
    scale = sumlx / suml2 if suml2 != 0 else f32(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(fmax + f32(0.1) * f32(step)) / vmax
        sumlx, suml2 = f32(0), f32(0)
        for i in range(n):
            q = max(-nmax, min(nmax - 1, _nearest(iscale * x[i])))
            w = x[i] * x[i]
            sumlx += w * x[i] * f32(q)
            suml2 += w * f32(q) * f32(q)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            for i in range(n):
                L[i] = nmax + max(-nmax, min(nmax - 1, _nearest(iscale * x[i])))
            scale = sumlx / suml2
            best = scale * sumlx
    return scale


@numba.njit(cache=True, parallel=True)
def _q6_k(x, d, scales, ql, qh):
    """x (blocks, 256) -> d (blocks,) fp16 values, scales (blocks, 16) int8, ql (blocks, 128), qh (blocks, 64)."""
    for b in numba.prange(x.shape[0]):
        L = np.zeros(QK_K, np.int8)
        sub_scales = np.empty(16, np.float32)
        max_scale, max_abs = f32(0), f32(0)
        for ib in range(16):
            sub_scales[ib] = _qx(x[b, 16 * ib : 16 * ib + 16], 32, L[16 * ib : 16 * ib + 16])
            if abs(sub_scales[ib]) > max_abs:
                max_abs = abs(sub_scales[ib])
                max_scale = sub_scales[ib]
        if max_abs < GROUP_MAX_EPS:
            d[b] = 0
            scales[b, :] = 0
            ql[b, :] = 0
            qh[b, :] = 0
            continue
        iscale = f32(-128) / max_scale
        d[b] = _fp16(f32(1) / iscale)
        for ib in range(16):
            scales[b, ib] = min(127, _nearest(iscale * sub_scales[ib]))
        for j in range(16):
            dj = d[b] * f32(scales[b, j])
            if dj == 0:
                continue
            for i in range(16):
                L[16 * j + i] = max(-32, min(31, _nearest(x[b, 16 * j + i] / dj))) + 32
        for j in range(0, QK_K, 128):
            for i in range(32):
                q1, q2 = L[j + i] & 0xF, L[j + i + 32] & 0xF
                q3, q4 = L[j + i + 64] & 0xF, L[j + i + 96] & 0xF
                ql[b, j // 2 + i] = q1 | (q3 << 4)
                ql[b, j // 2 + i + 32] = q2 | (q4 << 4)
                qh[b, j // 4 + i] = (
                    (L[j + i] >> 4)
                    | ((L[j + i + 32] >> 4) << 2)
                    | ((L[j + i + 64] >> 4) << 4)
                    | ((L[j + i + 96] >> 4) << 6)
                )


def _half_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)  # exact: the kernel rounded them already


def quantize_k(data: np.ndarray, type_name: str) -> np.ndarray:
    """float values (..., K) with K a multiple of 256 -> ggml's blocks as bytes (..., K / 256 * block bytes)."""
    shape = data.shape
    if shape[-1] % QK_K:
        raise ValueError(f"{type_name} needs rows of a multiple of {QK_K} values, got {shape[-1]}")
    x = np.ascontiguousarray(data, dtype=np.float32).reshape(-1, QK_K)  # (blocks, 256)
    n = x.shape[0]
    d = np.empty(n, np.float32)
    if type_name == "Q6_K":
        scales, ql, qh = np.empty((n, 16), np.int8), np.empty((n, 128), np.uint8), np.empty((n, 64), np.uint8)
        _q6_k(x, d, scales, ql, qh)
        parts = [ql, qh, scales.view(np.uint8), _half_bytes(d)]
    else:
        dmin, scales, qs = np.empty(n, np.float32), np.empty((n, 12), np.uint8), np.empty((n, 128), np.uint8)
        if type_name == "Q4_K":
            _q4_k(x, d, dmin, scales, qs)
            parts = [_half_bytes(d), _half_bytes(dmin), scales, qs]
        elif type_name == "Q5_K":
            qh = np.empty((n, 32), np.uint8)
            _q5_k(x, d, dmin, scales, qh, qs)
            parts = [_half_bytes(d), _half_bytes(dmin), scales, qh, qs]
        else:
            raise ValueError(f"no K-quant writer for {type_name}")
    blocks = np.concatenate(parts, axis=1)  # (blocks, block bytes)
    return blocks.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES[type_name])
