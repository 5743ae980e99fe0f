"""The wgpu backend's selection and sequence ops (topk, sample, conv1d, conv_transpose1d, transpose), the
state-space-model ops (causal_conv1d, ssm_scan) and attention_relative (VITS's text encoder), as a mixin of
Backend.

Sampling: greedy rows are an argmax on the GPU and only the ids come back. Other rows take their top
candidates (topk.wgsl) and the row's max and softmax denominator (sample.wgsl row_stats) on the GPU; the
host then picks among those few candidates exactly as the numpy backend does. A row whose pick lies past the
candidates (a very flat distribution) falls back to the numpy backend on that row.
"""

from __future__ import annotations

import operator

import numpy as np

from blazr.backends.array_api import _pick
from blazr.backends.array_api_ssm import check_conv_shapes, check_scan_shapes, sequence_spans
from blazr.backends.base import ACTIVATIONS, Array, SampleParams
from blazr.backends.wgpu_array import WgpuArray
from blazr.errors import ConfigError, UnsupportedError

_CANDIDATES = 64  # candidates per row when top_k does not bound them (the numpy backend's first prefix)
_MAX_RELATIVE_DIM = 256  # attention_relative.wgsl keeps one query in workgroup memory (MAX_D)


class SelectionSequenceOps:
    # ---- selection ----------------------------------------------------------------------------------
    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        rows = self._rows(x)
        values, indices = self.empty((rows.shape[0], k), x.dtype), self.empty((rows.shape[0], k), "i32")
        if values.size:
            params = {"n": rows.shape[1], "k": k, "x_stride": rows.row_stride}
            arrays = {"x": rows, "values": values, "indices": indices}
            self._run("topk", arrays, params, (rows.shape[0], 1, 1), aliases=(("T", x.dtype),))
        return values, indices

    def sample(self, logits: Array, params: SampleParams) -> Array:
        rows = self._rows(logits)
        temps = np.asarray(params.temperature, dtype=np.float32)
        ids = self.empty((rows.shape[0],), "i32")  # (B,)
        arrays = {"logits": rows, "ids": ids}
        knobs = {"vocab": rows.shape[1], "logits_stride": rows.row_stride, "out_off": 0}
        self._run("sample", arrays, knobs, (rows.shape[0], 1, 1), "argmax", aliases=(("T", rows.dtype),))
        if (temps <= 0).all():
            return ids
        picked = self.download(ids)
        for b, token in self._sample_rows(rows, params, temps).items():
            picked[b] = token
        return self.upload(picked)

    def _sample_rows(self, rows, params: SampleParams, temps: np.ndarray) -> dict[int, int]:
        """Token of every row with temperature > 0."""
        vocab = rows.shape[1]
        top_k = np.asarray(params.top_k)
        bounded = (top_k > 0) & (top_k < vocab)
        k = int(min(vocab, max([_CANDIDATES, *top_k[bounded].tolist()])))
        values, indices = self.topk(rows, k)  # (B, k) each
        stats = self.empty((rows.shape[0], 2), "f32")  # (B, 2): max, denominator
        arrays = {"logits": rows, "temperature": self.upload(np.where(temps > 0, temps, 1.0), "f32")}
        arrays["stats"] = stats
        knobs = {"vocab": vocab, "logits_stride": rows.row_stride, "out_off": 0}
        self._run("sample", arrays, knobs, (rows.shape[0], 1, 1), "row_stats", aliases=(("T", rows.dtype),))
        values, indices, stats = self.download(values), self.download(indices), self.download(stats)
        out = {}
        for b in np.nonzero(temps > 0)[0].tolist():
            cand = values[b].astype(np.float32) / np.float32(temps[b])  # (k,) as the numpy backend divides
            probs = np.exp(cand.astype(np.float64) - float(stats[b, 0]))
            row_k = int(top_k[b]) if bounded[b] else 0
            p, mp, u = float(params.top_p[b]), float(params.min_p[b]), float(params.uniform[b])
            if row_k:
                j = _pick(probs[:row_k] / probs[:row_k].sum(), p, mp, u, True)
            else:
                j = _pick(probs / float(stats[b, 1]), p, mp, u, complete=k == vocab)
            out[b] = int(indices[b, j]) if j is not None else self._sample_on_host(rows[b], params, b)
        return out

    def _sample_on_host(self, row, params: SampleParams, b: int) -> int:
        from blazr.backends.cpu import Backend as NumpyBackend

        knobs = int(params.top_k[b]), float(params.top_p[b]), float(params.min_p[b]), float(params.uniform[b])
        logits = self.download(row).astype(np.float32) / np.float32(params.temperature[b])
        return NumpyBackend()._sample_row(logits, *knobs)

    # ---- attention ----------------------------------------------------------------------------------
    def attention_relative(
        self, q: Array, k: Array, v: Array, rel_k: Array, rel_v: Array, scale: float
    ) -> Array:
        t, h, d = q.shape
        if d > _MAX_RELATIVE_DIM:
            raise UnsupportedError(
                f"device {self.name}: attention_relative takes head dims <= {_MAX_RELATIVE_DIM}, not {d}"
            )
        q, k, v = (a if a.rows_contiguous else self.contiguous(a) for a in (q, k, v))
        k, v = (a if a.dtype == q.dtype else self.contiguous(a, q.dtype) for a in (k, v))
        rel_k, rel_v = self.contiguous(rel_k, q.dtype), self.contiguous(rel_v, q.dtype)  # (2W + 1, D)
        out = self.empty((t, h, d), q.dtype)  # (T, H, D)
        if out.size:
            grid_y = min(t, 65535)  # past 65535 rows the grid folds into z
            arrays = {"q": q, "k": k, "v": v, "rel_k": rel_k, "rel_v": rel_v, "out": out}
            params = {"q_stride": q.row_stride, "k_stride": k.row_stride, "v_stride": v.row_stride}
            params |= {"rows": t, "heads": h, "dim": d, "window": (rel_k.shape[0] - 1) // 2}
            params |= {"grid_y": grid_y, "scale": scale}
            self._run("attention_relative", arrays, params, (h, grid_y, -(-t // grid_y)))
        return out

    # ---- sequence -----------------------------------------------------------------------------------
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
        if pre_act is not None:  # (unfused here: one more pass over x; the shader reads what act wrote)
            x = self.act(x, pre_act, slope=slope)
        out = self._conv1d(x, w, b, stride, pad, groups, dilation)
        return out if residual is None else self.binary("add", out, residual)

    def _conv1d(
        self, x: Array, w: Array, b: Array | None, stride: int, pad: int, groups: int, dilation: int
    ) -> Array:
        x, w = self.contiguous(x), self.contiguous(w, x.dtype)
        c_in, length = x.shape
        c_out, per_group_in, kw = w.shape
        l_out = (length + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
        out = self.empty((c_out, l_out), x.dtype)  # (C_out, L_out)
        if out.size:
            bias = w if b is None else self.contiguous(b, x.dtype)  # any buffer fills the unused binding
            params = {"length": length, "c_out": c_out, "per_group_in": per_group_in}
            params |= {"per_group_out": c_out // groups, "kw": kw, "stride": stride, "pad": pad}
            params |= {"dilation": dilation, "l_out": l_out, "has_bias": int(b is not None)}
            arrays = {"x": x, "w": w, "b": bias, "out": out}
            self._run("conv1d", arrays, params, (-(-l_out // 64), c_out, 1))
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
        if pre_act is not None:  # not fused here: one activation pass first
            x = self.act(x, pre_act, slope=slope)
        x, w = self.contiguous(x), self.contiguous(w, x.dtype)
        c_in, length = x.shape
        _, per_group_out, kw = w.shape  # (C_in, C_out/g, Kw)
        c_out = per_group_out * groups
        l_out = (length - 1) * stride - 2 * pad + kw
        out = self.empty((c_out, l_out), x.dtype)  # (C_out, L_out)
        if out.size:
            bias = w if b is None else self.contiguous(b, x.dtype)  # any buffer fills the unused binding
            params = {"length": length, "per_group_in": c_in // groups, "per_group_out": per_group_out}
            params |= {"kw": kw, "stride": stride, "pad": pad, "l_out": l_out, "has_bias": int(b is not None)}
            arrays = {"x": x, "w": w, "b": bias, "out": out}
            self._run("conv_transpose1d", arrays, params, (-(-l_out // 64), c_out, 1))
        return out

    def transpose(self, x: Array) -> Array:
        m, n = x.shape
        rows, cols = x.strides if x.strides is not None else (n, 1)  # in elements
        # a strided view of the same buffer, made contiguous by the copy kernel
        return self.contiguous(x.view((n, m), strides=(cols, rows)), force=True)  # (N, M)

    # ---- state-space models -------------------------------------------------------------------------
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
        if act is not None and act not in ACTIVATIONS:
            raise ConfigError(f"activation {act!r} is unknown; use one of {ACTIVATIONS}")
        self._check_states(states, "causal_conv1d")
        check_conv_shapes(x, w, b, states)
        # rows of a wider projection (Mamba's in_proj) are read in place
        x = x if x.rows_contiguous and not self._f16x2(x) else self.contiguous(x)
        w = self.contiguous(w, x.dtype)
        t_len, channels = x.shape
        out = self.empty((t_len, channels), x.dtype)  # (T, C)
        table = self._sequence_table(seq_slots, q_lens, fresh, t_len, states.shape[0])
        if table.shape[0] and channels:
            bias = w if b is None else self.contiguous(b, x.dtype)  # any buffer fills the unused binding
            params = {"channels": channels, "k": w.shape[1], "has_bias": int(b is not None)}
            params["x_stride"] = x.row_stride
            arrays = {"x": x, "w": w, "b": bias, "seqs": table, "states": states, "out": out}
            kind = {"KIND": 0 if act is None else ACTIVATIONS.index(act), "HAS_ACT": int(act is not None)}
            grid = (-(-channels // self.WG), table.shape[0], 1)
            self._run("causal_conv1d", arrays, params, grid, aliases=(("T", x.dtype),), **kind)
        return out

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
        self._check_states(states, "ssm_scan")
        check_scan_shapes(x, dt, A, B, C, D, states)
        dtype = x.dtype
        x, dt, b, c = (self.contiguous(v, dtype) for v in (x, dt, B, C))
        a, d = self.contiguous(A, "f32"), self.contiguous(D, "f32")  # (H,) or (H, N), (H,): f32 always
        t_len, heads, p = x.shape
        y = self.empty((t_len, heads, p), dtype)  # (T, H, P)
        table = self._sequence_table(seq_slots, q_lens, fresh, t_len, states.shape[0])
        if table.shape[0] and heads * p:
            params = {"heads": heads, "p": p, "groups": b.shape[1], "n": b.shape[2]}
            params["a_cols"] = 1 if a.ndim == 1 else a.shape[1]
            arrays = {
                "x": x,
                "dt": dt,
                "a": a,
                "b": b,
                "c": c,
                "d": d,
                "seqs": table,
                "states": states,
                "y": y,
            }
            grid = (-(-(heads * p) // self.WG), table.shape[0], 1)
            self._run("ssm_scan", arrays, params, grid, aliases=(("T", dtype),))
        return y

    def _check_states(self, states: Array, op: str) -> None:
        """The ops write states in place, so they take no copy: a dense f32 array only."""
        if not isinstance(states, WgpuArray) or states.dtype != "f32" or not states.contiguous:
            raise UnsupportedError(f"{op}: states must be a dense f32 array on device {self.name}")

    def _sequence_table(self, seq_slots, q_lens, fresh, t_len: int, n_slots: int) -> WgpuArray:
        """(B, 4) int32 [slot, first row, rows, fresh] of each sequence, checked against the T rows and S slots
        (sequence_spans) on the host: from the arrays' host copies, kept at upload, else one read-back. Every
        layer of a step passes the same three arrays, so the last table is kept while they are the same
        objects (held here, so their ids cannot be reused meanwhile)."""
        key = (seq_slots, q_lens, fresh)
        cached = getattr(self, "_sequence_cache", None)
        if cached is not None and cached[1] == (t_len, n_slots) and all(map(operator.is_, cached[0], key)):
            return cached[2]
        lists = [(a.host if a.host is not None else self.download(a)).reshape(-1).tolist() for a in key]
        spans = sequence_spans(t_len, n_slots, *lists)
        table = self.upload(np.array(spans, dtype=np.int32).reshape(-1, 4))
        self._sequence_cache = (key, (t_len, n_slots), table)
        return table
