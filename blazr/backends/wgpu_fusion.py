"""Dispatch fusion inside the wgpu backend (a mixin of wgpu.Backend): the op contract stays as it is, and an
op whose input is the output of the dispatch recorded just before it replaces that dispatch with one fused
kernel that writes both results. Dispatches are recorded lazily (wgpu_runtime.py), so nothing has run yet.

Fused pairs (the Llama decode step goes from 12 dispatches a layer to 9):
  * binary("add", a, b) then rms_norm(sum)  -> add_rms_norm.wgsl (residual add + the next layer's norm);
  * packed matvec of a gate/up weight then glu(gate, up) -> matvec_glu in shaders/_qmatmul.wgsl.
The first op's output is still written, so a later reader of it (a trace, the residual stream) sees it.
"""

from __future__ import annotations

from typing import Any

from blazr.backends.base import ACTIVATIONS


class FusionOps:
    """Needs self.rt, self._run, self.empty; ops call note_fusable after a dispatch that may be fused."""

    _last: tuple[str, tuple[int, int], dict[str, Any]] | None = None

    def note_fusable(self, kind: str, **info: Any) -> None:
        """Remember the dispatch just recorded; it stays fusable until any other dispatch or a submit."""
        self._last = (kind, (self.rt.stats.submits, self.rt.pending_count), info)

    def _take_last(self, kind: str, output) -> dict[str, Any] | None:
        """The info of the last dispatch if it is a `kind` whose output is `output`; that dispatch is dropped."""
        last, self._last = self._last, None
        if last is None or last[0] != kind or last[1] != (self.rt.stats.submits, self.rt.pending_count):
            return None
        info = last[2]
        out = info["out"]
        if out.buf is not output.buf or out.offset != output.offset or out.shape != output.shape:
            return None
        self.rt.drop_last()
        return info

    def fused_add_rms_norm(self, x, w, eps: float):
        """rms_norm(x) as one add_rms_norm dispatch when x is the sum the previous dispatch produced."""
        info = self._take_last("add", x) if x.ndim == 2 else None
        if info is None:
            return None
        a, b, total = info["a"], info["b"], info["out"]
        out = self.empty(x.shape, x.dtype)  # (T, D)
        params = {"dim": x.shape[1], "a_stride": a.row_stride, "b_stride": b.row_stride, "eps": eps}
        arrays = {"a": a, "b": b, "w": self.contiguous(w, x.dtype), "sum": total, "out": out}
        self._run("add_rms_norm", arrays, params, (x.shape[0], 1, 1))
        return out

    def fused_glu(self, gate, up, kind: str):
        """glu(gate, up) as one matvec_glu dispatch when gate | up are the halves of the previous packed matvec."""
        last = self._last
        if last is None or last[0] != "matvec" or gate.ndim != 2 or up.ndim != 2:
            self._last = None
            return None
        whole = last[2]["out"]
        f = whole.shape[1] // 2
        halves = gate.shape[1] == up.shape[1] == f and up.offset == gate.offset + f
        info = self._take_last("matvec", whole) if halves and gate.offset == whole.offset else None
        if info is None:
            return None
        out = self.empty(gate.shape, gate.dtype)  # (T, F)
        arrays = info["arrays"] | {"glu": out}
        params = {k: v for k, v in info["params"].items() if k != "glu_off"}
        grid = (-(-f // self.WG), info["grid"][1], 1)
        self._run(
            info["op"], arrays, params, grid, "matvec_glu", (("T", out.dtype),), KIND=ACTIVATIONS.index(kind)
        )
        return out
