"""The state-space-model ops of backends/base.py written against an array module `xp` (a mixin of
ArrayAPIBackend): causal_conv1d and ssm_scan over B sequences laid back to back, each carrying its state in a
slot of `states` that the op updates in place. A loop over the sequences; within one, causal_conv1d is K
vectorised taps and ssm_scan one (H, P, N) update per row.
"""

from __future__ import annotations

from blazr.backends.base import ACTIVATIONS, Array
from blazr.errors import ConfigError


def sequence_spans(
    t_len: int, n_slots: int, slots: list[int], lens: list[int], fresh: list[int]
) -> list[tuple[int, int, int, bool]]:
    """(slot, first row, rows, fresh) of each sequence, after checking the batch against T and S."""
    if not len(slots) == len(lens) == len(fresh):
        raise ValueError(
            f"seq_slots, q_lens and fresh differ in length ({len(slots)}, {len(lens)}, {len(fresh)})"
        )
    if any(n < 0 for n in lens) or sum(lens) != t_len:
        raise ValueError(f"q_lens {lens} must be >= 0 and sum to the {t_len} rows given")
    if any(s < 0 or s >= n_slots for s in slots):
        raise IndexError(f"a slot of {slots} lies outside the {n_slots} state slots")
    spans, start = [], 0
    for slot, n, new in zip(slots, lens, fresh, strict=True):
        spans.append((slot, start, n, bool(new)))
        start += n
    return spans


def check_conv_shapes(x, w, b, states) -> None:
    """Raise ValueError unless x (T, C), w (C, K), b (C,) or None and states (S, K-1, C) agree (the kernels
    index by these shapes without bounds checks)."""
    c, k = w.shape
    if len(x.shape) != 2 or x.shape[1] != c or tuple(states.shape[1:]) != (k - 1, c) or k < 1:
        raise ValueError(
            f"causal_conv1d: x {tuple(x.shape)}, w {tuple(w.shape)} and states {tuple(states.shape)} do not "
            "agree: want x (T, C), w (C, K), states (S, K-1, C)"
        )
    if b is not None and tuple(b.shape) != (c,):
        raise ValueError(f"causal_conv1d: bias {tuple(b.shape)} for {c} channels")


def check_scan_shapes(x, dt, A, B, C, D, states) -> None:
    """Raise ValueError unless ssm_scan's shapes agree (see check_conv_shapes)."""
    t, h, p = x.shape
    g, n = B.shape[1], B.shape[2]
    fits = (
        tuple(dt.shape) == (t, h)
        and tuple(A.shape) in ((h,), (h, n))
        and tuple(B.shape) == tuple(C.shape) == (t, g, n)
        and tuple(D.shape) == (h,)
        and tuple(states.shape[1:]) == (h, p, n)
        and 0 < g <= h
        and h % g == 0
    )
    if not fits:
        shapes = ", ".join(
            f"{name} {tuple(a.shape)}"
            for name, a in zip("x dt A B C D states".split(), (x, dt, A, B, C, D, states), strict=True)
        )
        raise ValueError(
            f"ssm_scan: {shapes} do not agree: want x (T, H, P), dt (T, H), A (H,) or (H, N), B and C "
            "(T, G, N) with G dividing H, D (H,), states (S, H, P, N)"
        )


class SSMOps:
    """Needs self.xp (the array module), self._host and self.act."""

    def _spans(self, t_len: int, states: Array, seq_slots: Array, q_lens: Array, fresh: Array):
        lists = (self._host(a).tolist() for a in (seq_slots, q_lens, fresh))
        return sequence_spans(t_len, states.shape[0], *lists)

    def causal_conv1d(
        self,
        x: Array,
        w: Array,
        b: Array | None,
        states: Array,
        seq_slots: Array,
        q_lens: Array,
        fresh: Array,
        act: str | None = "silu",
    ) -> Array:
        xp = self.xp
        if act is not None and act not in ACTIVATIONS:
            raise ConfigError(f"activation {act!r} is unknown; use one of {ACTIVATIONS}")
        check_conv_shapes(x, w, b, states)
        k = w.shape[1]
        taps = xp.ascontiguousarray(w.T, dtype=states.dtype)  # (K, C), float32 like the state
        out = xp.empty(x.shape, dtype=states.dtype)  # (T, C)
        for slot, start, n, new in self._spans(x.shape[0], states, seq_slots, q_lens, fresh):
            if new:
                states[slot] = 0.0
            if n == 0:
                continue
            window = xp.concatenate([states[slot], x[start : start + n].astype(states.dtype)])  # (K-1+n, C)
            acc = window[0:n] * taps[0]  # (n, C)
            for j in range(1, k):
                acc += window[j : j + n] * taps[j]
            out[start : start + n] = acc
            states[slot] = window[n:]  # the window's last K-1 rows
        if b is not None:
            out += b
        if act is not None:
            out = self.act(out, act)
        return out.astype(x.dtype, copy=False)

    def ssm_scan(
        self,
        x: Array,
        dt: Array,
        A: Array,
        B: Array,
        C: Array,
        D: Array,
        states: Array,
        seq_slots: Array,
        q_lens: Array,
        fresh: Array,
    ) -> Array:
        xp = self.xp
        check_scan_shapes(x, dt, A, B, C, D, states)
        f32 = states.dtype
        _, h, p = x.shape
        g, n_state = B.shape[1], B.shape[2]
        per_group = h // g
        rates = (A[:, None] if A.ndim == 1 else A).astype(f32)  # (H, 1) or (H, N)
        y = xp.empty(x.shape, dtype=f32)  # (T, H, P)
        for slot, start, n, new in self._spans(x.shape[0], states, seq_slots, q_lens, fresh):
            if new:
                states[slot] = 0.0
            if n == 0:
                continue
            rows = slice(start, start + n)
            xs, dts = x[rows].astype(f32), dt[rows].astype(f32)  # (n, H, P), (n, H)
            bs, cs = B[rows].astype(f32), C[rows].astype(f32)  # (n, G, N) each
            decay = xp.exp(dts[:, :, None] * rates)  # (n, H, 1) or (n, H, N)
            dx = (dts[:, :, None] * xs).reshape(n, g, per_group, p)  # (n, G, H/G, P)
            view = states[slot]
            state = xp.ascontiguousarray(view)  # (H, P, N): the slot itself when it is contiguous
            by_group = state.reshape(g, per_group, p, n_state)  # (G, H/G, P, N) view
            out = y[rows].reshape(n, g, per_group * p)  # (n, G, H/G * P) view
            for t in range(n):
                state *= decay[t][:, None, :]
                by_group += dx[t][:, :, :, None] * bs[t][:, None, None, :]
                out[t] = xp.matmul(by_group.reshape(g, per_group * p, n_state), cs[t][:, :, None])[..., 0]
            if state is not view:
                states[slot] = state
        y += D[:, None].astype(f32) * x.astype(f32)
        return y.astype(x.dtype, copy=False)
