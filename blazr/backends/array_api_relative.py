"""attention_relative on the array backends (numpy, and any other array module with its API): a mixin of
ArrayAPIBackend, kept apart so array_api.py stays one file's worth."""

from __future__ import annotations

from blazr.backends.base import Array


class RelativeAttentionOps:
    xp = None  # the array module (set by ArrayAPIBackend)

    def attention_relative(
        self, q: Array, k: Array, v: Array, rel_k: Array, rel_v: Array, scale: float
    ) -> Array:
        xp = self.xp
        t, _, _ = q.shape
        window = (rel_k.shape[0] - 1) // 2
        qh, kh, vh = (xp.ascontiguousarray(a.transpose(1, 0, 2)) for a in (q, k, v))  # (H, T, D) each
        scores = xp.matmul(qh, kh.transpose(0, 2, 1))  # (H, T, T)
        rel_scores = xp.matmul(qh, rel_k.T)  # (H, T, 2W + 1): query i against offsets -W..W
        rows = xp.arange(t)
        for r in range(2 * window + 1):  # one diagonal per offset j - i = r - W
            offset = r - window
            i = rows[max(0, -offset) : max(0, t - max(0, offset))]  # empty when |offset| >= T
            scores[:, i, i + offset] += rel_scores[:, i, r]
        scores *= xp.asarray(scale, dtype=scores.dtype)
        scores -= scores.max(axis=-1, keepdims=True)
        p = xp.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)  # (H, T, T)
        out = xp.matmul(p, vh)  # (H, T, D)
        band = xp.zeros(p.shape[:2] + (2 * window + 1,), dtype=p.dtype)  # (H, T, 2W + 1)
        for r in range(2 * window + 1):
            offset = r - window
            i = rows[max(0, -offset) : max(0, t - max(0, offset))]  # empty when |offset| >= T
            band[:, i, r] = p[:, i, i + offset]
        out += xp.matmul(band, rel_v)  # (H, T, D)
        return xp.ascontiguousarray(out.transpose(1, 0, 2))  # (T, H, D)
