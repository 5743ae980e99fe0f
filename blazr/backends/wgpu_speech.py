"""The wgpu backend's speech-synthesis ops (lstm, stft, istft, instance_norm, snake, concat) as a mixin of
Backend: one shader each (shaders/<op>.wgsl)."""

from __future__ import annotations

import numpy as np

from blazr.backends.base import Array
from blazr.backends.wgpu_runtime import grid_1d
from blazr.errors import UnsupportedError

_MAX_LSTM_HIDDEN = 1024  # lstm.wgsl keeps h and c of one direction in workgroup memory (MAX_H)
_LSTM_LOOP_BUDGET = 1 << 15  # recurrent multiply-adds one invocation makes in a dispatch (see lstm.wgsl)


class SpeechOps:
    def lstm(self, gates: Array, w_hh: Array) -> Array:
        gates, w_hh = self.contiguous(gates), self.contiguous(w_hh, gates.dtype)
        steps, hidden = gates.shape[0], gates.shape[1] // 8
        if hidden > _MAX_LSTM_HIDDEN:
            raise UnsupportedError(
                f"device {self.name}: lstm takes hidden sizes <= {_MAX_LSTM_HIDDEN}, not {hidden}"
            )
        out = self.empty((steps, 2 * hidden), gates.dtype)  # (T, 2H)
        if out.size:
            state = self.upload(np.zeros((2, 2, hidden), dtype=np.float32), "f32")  # (2, 2, H): h, c
            units = -(-hidden // self.WG)  # hidden units per invocation
            run = max(1, _LSTM_LOOP_BUDGET // (units * hidden))  # steps per dispatch
            arrays = {"gates": gates, "w_hh": w_hh, "state": state, "out": out}
            for step0 in range(0, steps, run):
                params = {
                    "steps": steps,
                    "step0": step0,
                    "n_steps": min(run, steps - step0),
                    "hidden": hidden,
                }
                self._run("lstm", arrays, params, (2, 1, 1), aliases=(("T", gates.dtype),))
        return out

    def stft(self, x: Array, window: Array, hop: int) -> tuple[Array, Array]:
        x, window = self.contiguous(x), self.contiguous(window, x.dtype)
        n_fft = window.shape[0]
        frames, bins = x.shape[0] // hop + 1, n_fft // 2 + 1
        mag, phase = self.empty((bins, frames), x.dtype), self.empty((bins, frames), x.dtype)  # (K, F) each
        params = {"length": x.shape[0], "n_fft": n_fft, "hop": hop, "frames": frames, "bins": bins}
        arrays = {"x": x, "window": window, "mag": mag, "phase": phase}
        self._run("stft", arrays, params, grid_1d(-(-bins * frames // self.WG)))
        return mag, phase

    def istft(self, mag: Array, phase: Array, window: Array, hop: int) -> Array:
        mag = self.contiguous(mag)
        phase, window = self.contiguous(phase, mag.dtype), self.contiguous(window, mag.dtype)
        frames = mag.shape[1]
        out = self.empty((hop * (frames - 1),), mag.dtype)  # (L,)
        if out.size:
            params = {"n_fft": window.shape[0], "hop": hop, "frames": frames, "out_len": out.shape[0]}
            arrays = {"mag": mag, "phase": phase, "window": window, "out": out}
            self._run("istft", arrays, params, grid_1d(-(-out.shape[0] // self.WG)))
        return out

    def instance_norm(self, x: Array, scale: Array, shift: Array, eps: float) -> Array:
        x = self.contiguous(x)
        scale, shift = self.contiguous(scale, x.dtype), self.contiguous(shift, x.dtype)
        out = self.empty(x.shape, x.dtype)  # (C, L)
        if out.size:
            arrays = {"x": x, "scale": scale, "shift": shift, "out": out}
            self._run("instance_norm", arrays, {"length": x.shape[1], "eps": eps}, (x.shape[0], 1, 1))
        return out

    def snake(self, x: Array, alpha: Array) -> Array:
        x = self.contiguous(x)
        alpha = self.contiguous(alpha, x.dtype)
        out = self.empty(x.shape, x.dtype)  # (C, L)
        if out.size:
            grid = grid_1d(-(-x.size // self.WG))
            params = {"n": x.size, "length": x.shape[1], "grid_x": grid[0]}
            self._run("snake", {"x": x, "alpha": alpha, "out": out}, params, grid)
        return out

    def concat(self, a: Array, b: Array, axis: int = 0) -> Array:
        a = self.contiguous(a)
        b = self.contiguous(b, a.dtype)
        if axis == 0:  # one "row" each: the whole of a, then the whole of b
            out = self.empty((a.shape[0] + b.shape[0], *a.shape[1:]), a.dtype)  # (M + N, L)
            row_a, row_b = a.size, b.size
        elif axis == -1:
            if a.shape[:-1] != b.shape[:-1]:
                raise ValueError(f"concat: shapes {a.shape} and {b.shape} differ before the last axis")
            out = self.empty((*a.shape[:-1], a.shape[-1] + b.shape[-1]), a.dtype)  # (..., La + Lb)
            row_a, row_b = a.shape[-1], b.shape[-1]
        else:
            raise ValueError(f"concat: axis must be 0 or -1, not {axis}")
        if out.size:
            grid = grid_1d(-(-out.size // self.WG))
            params = {"n": out.size, "row_a": row_a, "row_b": row_b, "grid_x": grid[0]}
            self._run("concat", {"a": a, "b": b, "out": out}, params, grid)
        return out
