"""The WebGPU backend (`--device wgpu[:N]`): every op of backends/base.py as a WGSL compute shader.

Arrays are WgpuArray views into pooled device buffers; ops record dispatches that run at the next
download()/sync() in one submit (wgpu_runtime.py). Dense f32 weights, and f16 where the adapter has
shader-f16. Without shader-f16 (or with the option f16="packed"), a 2-d F16 weight for f32 compute keeps
its 16 bits: an "f16" array there is storage only, two halves a u32 word, which matmul and embed unpack in
registers (the *_f16x2 entries) and every other op widens to f32 first. Quantized weights of PACKED_FORMATS
stay in their GGML blocks (wgpu_quant.py); other formats are dequantized at load.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import numpy as np

from blazr.backends.base import ACTIVATIONS, BINARY_OPS, OPS, ROPE_STYLES, Array
from blazr.backends.wgpu_array import ITEMSIZE, NUMPY_DTYPES, RowChunks, WgpuArray
from blazr.backends.wgpu_device import _wgpu, adapter_memory, device_weight_bytes, open_device
from blazr.backends.wgpu_fusion import FusionOps
from blazr.backends.wgpu_ops import SelectionSequenceOps
from blazr.backends.wgpu_quant import PACKED_FORMATS, PackedOps
from blazr.backends.wgpu_runtime import Runtime, grid_1d
from blazr.backends.wgpu_speech import SpeechOps
from blazr.errors import ConfigError, UnsupportedError
from blazr.quant import QuantRowStack, QuantWeight
from blazr.quant.experts import QuantExperts

WG = 64  # workgroup size of every kernel (an override constant; llvmpipe runs 8-wide, GPUs 32/64-wide)
MAX_HEAD_DIM = 256  # attention_dense.wgsl keeps one query in workgroup memory
# attention.wgsl's query buffer and per-invocation outputs are sized for 256 features; a wider head (DeepSeek's
# 576-value latent) gets a pipeline of its own with both resized, up to this
MAX_PAGED_HEAD_DIM = 1024
F16_MODES = ("auto", "packed")  # auto: native f16 where the adapter has shader-f16, else packed F16 weights
_HOST_MIRROR = (
    1 << 16
)  # small uploads keep their host values (positions, lengths, inv_freq) for host planning


def _groups(n: int) -> int:
    return max(1, -(-n // WG))


class Backend(SelectionSequenceOps, PackedOps, FusionOps, SpeechOps):
    """One WebGPU adapter (enumeration order, as `blazr devices` lists them)."""

    weight_formats: tuple[str, ...] = PACKED_FORMATS
    WG = WG

    def __init__(self, index: int = 0, f16: str = "auto", **options):
        if options:
            raise ConfigError(f"--device wgpu:{index}: unknown backend option(s) {sorted(options)}")
        if f16 not in F16_MODES:
            raise ConfigError(f"--device wgpu:{index}: f16={f16!r} is unknown; use one of {F16_MODES}")
        # "packed" opens the device without shader-f16, as on an adapter that lacks it: a kernel that still
        # needs native f16 then fails to compile instead of passing unnoticed
        self.adapter, device = open_device(index, without=("shader-f16",) if f16 == "packed" else ())
        self.name = f"wgpu:{index}"
        self.native_f16 = "shader-f16" in device.features
        self.act_dtypes = ("f32", "f16") if self.native_f16 else ("f32",)
        self.rt = Runtime(_wgpu(), device)
        self.stats = self.rt.stats  # dispatches, submits, bytes read back: `blazr bench` reports them
        self.memory_limit = adapter_memory(self.adapter)  # bytes, or None where WebGPU cannot tell
        self._rope_cache = None

    # ---- memory -------------------------------------------------------------------------------------
    def check_model_fits(self, tensors: dict, dtype: str) -> None:
        """Refuse, before any upload, weights larger than the adapter's memory (build_model calls this)."""
        need = device_weight_bytes(tensors, dtype, self.weight_formats, f16_storage=not self.native_f16)
        if self.memory_limit is not None and need > self.memory_limit:
            raise UnsupportedError(
                f"the model's weights need {need / 2**20:.1f} MiB on device {self.name}, but the adapter has "
                f"{self.memory_limit / 2**20:.1f} MiB; use a smaller or more quantized model, or --device cpu"
            )

    def _check_dtype(self, dtype: str) -> str:
        if dtype not in self.act_dtypes and dtype != "i32":
            why = "it runs without shader-f16" if dtype == "f16" else "it is not supported here"
            raise UnsupportedError(f"device {self.name} cannot hold {dtype} arrays: {why}; use --dtype f32")
        return dtype

    def upload(self, a: np.ndarray, dtype: str | None = None) -> Array:
        a = np.asarray(a)
        target = self._storage_dtype(a, dtype)
        data = np.ascontiguousarray(a, dtype=NUMPY_DTYPES[target])
        if data.nbytes > self.rt.max_binding and data.ndim == 2:
            return self._upload_row_blocks(data, target)
        return self._upload_dense(data, target)

    def _storage_dtype(self, a: np.ndarray, dtype: str | None) -> str:
        """The device dtype of an upload. A float16 2-d array (an F16 weight) for f32 compute stays 16-bit
        without native f16: packed halves that matmul and embed read and other ops widen."""
        if a.dtype.kind in "iub":
            return "i32"
        if a.dtype.kind != "f":
            raise UnsupportedError(f"device {self.name} cannot upload an array of dtype {a.dtype}")
        if not self.native_f16 and a.dtype == np.float16 and a.ndim == 2 and dtype in (None, "f32"):
            return "f16"
        return self._check_dtype(dtype or "f32")

    def _f16x2(self, a) -> bool:
        """Whether `a` is F16 storage without native f16 (read by kernels as two halves a u32 word)."""
        return a.dtype == "f16" and not self.native_f16

    def _compute_dtype(self, dtype: str) -> str:
        """The activation dtype an op on a weight of `dtype` computes in: f32 for packed F16 storage."""
        return "f32" if dtype == "f16" and not self.native_f16 else dtype

    def _upload_dense(self, data: np.ndarray, target: str) -> WgpuArray:
        buf = self.rt.alloc(max(data.nbytes, 4), for_upload=True)
        if data.nbytes:
            self.rt.write(buf, memoryview(data).cast("B"))
        small = data.size <= _HOST_MIRROR and (target == "i32" or data.ndim == 1)
        return WgpuArray(self, buf, data.shape, target, host=data.copy() if small else None)

    def _upload_row_blocks(self, data: np.ndarray, dtype: str) -> RowChunks:
        """A 2-d weight past the binding limit as row blocks, each within the limit."""
        rows = max(1, self.rt.max_binding // (data.shape[1] * data.itemsize) // 4 * 4)
        return RowChunks([self._upload_dense(data[i : i + rows], dtype) for i in range(0, len(data), rows)])

    def download(self, a: Array) -> np.ndarray:
        a = self.contiguous(a)
        data = self.rt.read(a)
        return np.frombuffer(data, dtype=NUMPY_DTYPES[a.dtype]).reshape(a.shape).copy()

    def empty(self, shape: tuple[int, ...], dtype: str = "f32") -> Array:
        self._check_dtype(dtype)
        shape = tuple(int(n) for n in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * ITEMSIZE[dtype]
        return WgpuArray(self, self.rt.alloc(max(nbytes, 4)), shape, dtype)

    def sync(self) -> None:
        self.rt.wait()

    def contiguous(self, a: WgpuArray, dtype: str | None = None, force: bool = False) -> WgpuArray:
        """a itself when dense and of dtype (unless force), else a dense copy (converted to dtype). A copy of
        packed F16 storage is f32: one invocation cannot write half of a u32 word."""
        dtype = dtype or a.dtype
        if a.contiguous and a.dtype == dtype and not force:
            return a
        widen = self._f16x2(a)
        dtype = "f32" if widen else dtype
        out = self.empty(a.shape, dtype)
        if a.size == 0:
            return out
        shape, strides = _four_dims(a.shape, a.strides)
        params = {"n": a.size, "d1": shape[1], "d2": shape[2], "d3": shape[3]}
        params |= {f"x{i}": s for i, s in enumerate(strides)}
        grid = grid_1d(_groups(a.size))
        if widen:
            arrays, params = {"xh": a, "out": out}, params | {"x_off": a.offset}
            self._run("contiguous", arrays, params, grid, "widen_f16x2", (("T", dtype),))
        else:
            aliases = (("S", a.dtype), ("T", dtype))
            self._run("contiguous", {"x": a, "out": out}, params, grid, aliases=aliases)
        return out

    def _run(self, op, arrays, params, grid, entry="main", aliases=None, **constants) -> None:
        self._last = None  # a fusable dispatch is only fusable with the op right after it
        dtype = next(a.dtype for a in arrays.values() if a.dtype != "i32") if aliases is None else None
        aliases = (("T", dtype),) if aliases is None else aliases
        consts = tuple(sorted({"WG": WG, **constants}.items()))
        self.rt.dispatch(op, arrays, params, grid, entry, aliases, consts)

    def _rows(self, x: WgpuArray, dtype: str | None = None) -> WgpuArray:
        """x as a (rows, last axis) view whose rows are dense, in dtype (copies only when it must)."""
        dtype = dtype or x.dtype
        if x.ndim == 2 and x.rows_contiguous and x.dtype == dtype:
            return x
        return self.contiguous(x, dtype).reshape(-1, x.shape[-1])

    # ---- linear algebra -----------------------------------------------------------------------------
    def embed(self, table: Array, ids: Array) -> Array:
        if isinstance(table, QuantWeight | QuantRowStack):
            return self.embed_packed(table, ids)
        parts = self._row_blocks(table)
        out = self.empty((ids.shape[0], table.shape[1]), self._compute_dtype(table.dtype))  # (T, D)
        if out.size:
            ids = self.contiguous(ids)
            for start, part in parts:
                params = {"dim": part.shape[1], "table_off": part.offset, "table_stride": part.row_stride}
                params |= {"row_lo": start, "row_hi": start + part.shape[0]}
                entry, name = ("main_f16x2", "table_h") if self._f16x2(part) else ("main", "table")
                arrays = {name: part, "ids": ids, "out": out}
                grid = (_groups(part.shape[1]), len(ids), 1)
                self._run("embed", arrays, params, grid, entry, (("T", out.dtype),))
        return out

    def matmul(self, x: Array, w: Array) -> Array:
        if isinstance(w, QuantWeight | QuantRowStack):
            return self.matmul_packed(x, w)
        parts = self._row_blocks(w, "matmul")
        dtype = self._compute_dtype(w.dtype)
        x = self._rows(x, dtype)
        if x.shape[1] != w.shape[1]:  # a kernel would read past x's rows instead of failing
            raise UnsupportedError(f"matmul: x has {x.shape[1]} features but the weight has {w.shape[1]}")
        t, n = x.shape[0], w.shape[0]
        out = self.empty((t, n), dtype)  # (T, N)
        if out.size:
            for start, part in parts:
                self._matmul_into(x, part, out[:, start : start + part.shape[0]])
        return out

    def _matmul_into(self, x: WgpuArray, w: WgpuArray, out: WgpuArray) -> None:
        """out (T, n) = x @ w.T for a dense w (n, K); out may be a column block of a wider output."""
        (t, k), n = x.shape, w.shape[0]
        params = {"tokens": t, "k": k, "n": n, "x_stride": x.row_stride, "out_stride": out.strides[0]}
        params["w_off"] = w.offset
        name, suffix = ("wh", "_f16x2") if self._f16x2(w) else ("w", "")
        aliases = (("T", out.dtype),)
        if t < 4 and all(v % 4 == 0 for v in (k, x.offset, x.row_stride, w.offset)):
            arrays = {"x4": x, name + "4": w, "out": out}
            self._run("matmul", arrays, params, (_groups(n), t, 1), "matvec4" + suffix, aliases)
        else:
            arrays = {"x": x, name: w, "out": out}
            self._run("matmul", arrays, params, (_groups(n), -(-t // 4), 1), "main" + suffix, aliases)

    def _row_blocks(self, w, op: str = "embed") -> list[tuple[int, WgpuArray]]:
        """(first row, block) pairs: one for an ordinary array, several for a RowChunks weight."""
        if isinstance(w, RowChunks):
            return list(zip(w.starts, w.parts, strict=False))
        return [(0, self._dense(w, op) if op != "embed" else self._rows(w))]

    def matmul_experts(self, x: Array, w: Array, expert_ids: Array) -> Array:
        if isinstance(w, QuantExperts):
            return self.matmul_experts_packed(x, w, expert_ids)
        w = self._dense(w, "matmul_experts")
        x, ids = self._rows(x, w.dtype), self.contiguous(expert_ids)
        t, per_token = ids.shape
        n = w.shape[1]
        out = self.empty((t, per_token, n), w.dtype)  # (T, k, N)
        if out.size:
            params = {"k": x.shape[1], "n": n, "x_stride": x.row_stride, "per_token": per_token}
            arrays = {"x": x, "w": w, "expert_ids": ids, "out": out}
            self._run("matmul_experts", arrays, params, (_groups(n), t * per_token, 1))
        return out

    def _dense(self, w, op: str) -> WgpuArray:
        if not isinstance(w, WgpuArray):  # a packed quantized weight, or a RowChunks in an op without blocks
            fmt = getattr(w, "format", type(w).__name__)
            raise UnsupportedError(f"device {self.name} does not support {op} on {fmt} weights")
        return self.contiguous(w)

    # ---- normalisation ------------------------------------------------------------------------------
    def rms_norm(self, x: Array, w: Array, eps: float) -> Array:
        fused = self.fused_add_rms_norm(x, w, eps)
        if fused is not None:
            return fused
        rows = self._rows(x)
        out = self.empty(rows.shape, x.dtype)  # (T, D)
        if out.size:
            params = {"dim": rows.shape[1], "x_stride": rows.row_stride, "eps": eps}
            arrays = {"x": rows, "w": self.contiguous(w, x.dtype), "out": out}
            self._run("rms_norm", arrays, params, (rows.shape[0], 1, 1))
        return out.reshape(x.shape)

    def layer_norm(self, x: Array, w: Array, b: Array | None, eps: float) -> Array:
        rows = self._rows(x)
        out = self.empty(rows.shape, x.dtype)  # (T, D)
        if out.size:
            w = self.contiguous(w, x.dtype)
            bias = w if b is None else self.contiguous(b, x.dtype)  # any buffer fills the unused binding
            params = {"dim": rows.shape[1], "x_stride": rows.row_stride, "has_bias": int(b is not None)}
            arrays = {"x": rows, "w": w, "b": bias, "out": out}
            self._run("layer_norm", arrays, params | {"eps": eps}, (rows.shape[0], 1, 1))
        return out.reshape(x.shape)

    # ---- attention ----------------------------------------------------------------------------------
    def rope(
        self, x: Array, positions: Array, inv_freq: Array, style: str, rot_dim: int | None = None
    ) -> Array:
        if style not in ROPE_STYLES:
            raise ConfigError(f"rope style {style!r} is unknown; use one of {ROPE_STYLES}")
        t, h, dh = x.shape
        x = x if x.rows_contiguous else self.contiguous(x)
        out = self.empty((t, h, dh), x.dtype)  # (T, H, Dh)
        if out.size:
            rot = dh if rot_dim is None else int(rot_dim)
            params = {"heads": h, "head_dim": dh, "rot": rot, "x_stride": x.row_stride}
            arrays = {"x": x, "table": self._rope_table(positions, inv_freq), "out": out}
            style_id = ROPE_STYLES.index(style)
            self._run(
                "rope", arrays, params, (_groups(h * dh), t, 1), aliases=(("T", x.dtype),), STYLE=style_id
            )
        return out

    def _rope_table(self, positions: WgpuArray, inv_freq: WgpuArray) -> WgpuArray:
        """(T, R/2, 2) [cos, sin] in f32, from float64 angles; every layer of a step shares one table."""
        cached = self._rope_cache
        if cached is not None and cached[0] is positions and cached[1] is inv_freq:
            return cached[2]
        pos = positions.host if positions.host is not None else self.download(positions)
        freq = inv_freq.host if inv_freq.host is not None else self.download(inv_freq)
        angles = pos.astype(np.float64)[:, None] * freq.astype(np.float64)[None, :]  # (T, R/2)
        table = self.upload(np.stack([np.cos(angles), np.sin(angles)], axis=-1), "f32")  # (T, R/2, 2)
        self._rope_cache = (positions, inv_freq, table)
        return table

    def kv_write(self, k_cache: Array, v_cache: Array, k: Array, v: Array, slots: Array) -> None:
        k, v = (a if a.rows_contiguous else self.contiguous(a) for a in (k, v))
        if k.shape[0] == 0:
            return
        row = k_cache.shape[1] * k_cache.shape[2]
        if v_cache is k_cache:
            # one array as keys and values (latent attention): one writable binding, written from k only
            arrays = {"k": k, "slots": self.contiguous(slots), "k_cache": k_cache}
            params = {"row": row, "k_stride": k.row_stride, "v_off": 0, "v_stride": 0, "v_cache_off": 0}
            self._run("kv_write", arrays, params, (_groups(row), k.shape[0], 1), "k_only")
            return
        arrays = {"k": k, "v": v, "slots": self.contiguous(slots), "k_cache": k_cache, "v_cache": v_cache}
        params = {"row": row, "k_stride": k.row_stride, "v_stride": v.row_stride}
        self._run("kv_write", arrays, params, (_groups(row), k.shape[0], 1))

    def attention(
        self,
        q: Array,
        k_cache: Array,
        v_cache: Array,
        block_tables: Array,
        ctx_lens: Array,
        q_lens: Array,
        block_size: int,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
        alibi: Array | None = None,
        sinks: Array | None = None,
    ) -> Array:
        t, h, dh = q.shape
        if dh > MAX_PAGED_HEAD_DIM:
            raise UnsupportedError(
                f"device {self.name}: attention supports head_dim <= {MAX_PAGED_HEAD_DIM}, not {dh}"
            )
        aliases = (("T", q.dtype),)
        if (
            dh > MAX_HEAD_DIM
        ):  # sizes in multiples of the workgroup: each invocation keeps MAX_DH / WG outputs
            wide = -(-dh // WG) * WG
            aliases += (("MAX_DH", str(wide)), ("PER_INVOCATION", str(wide // WG)))
        q = q if q.rows_contiguous else self.contiguous(q)
        out = self.empty((t, h, dh), q.dtype)  # (T, H, Dh)
        if out.size:
            tables = self.contiguous(block_tables)
            arrays = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_tables": tables}
            arrays |= {"ctx_lens": self.contiguous(ctx_lens), "q_lens": self.contiguous(q_lens), "out": out}
            params = {"q_stride": q.row_stride, "max_blocks": tables.shape[1], "block_size": block_size}
            params |= {
                "heads": h,
                "kv_heads": k_cache.shape[1],
                "head_dim": dh,
                "window": max(0, int(window)),
                "has_alibi": int(alibi is not None),
                "has_sinks": int(sinks is not None),
            }
            # slopes and sinks are read as f32 whatever q's dtype; any buffer fills a binding without them
            arrays["alibi"] = k_cache if alibi is None else self.contiguous(alibi, "f32")  # (H,)
            arrays["sinks"] = k_cache if sinks is None else self.contiguous(sinks, "f32")  # (H,)
            self._run(
                "attention", arrays, params | {"scale": scale, "softcap": softcap}, (h, t, 1), "main", aliases
            )
        return out

    def attention_dense(
        self, q, k, v, q_lens, kv_lens, scale, causal=False, window=0, rel_bias=None
    ) -> Array:
        t, h, dk = q.shape
        dv = v.shape[2]
        if max(dk, dv) > MAX_HEAD_DIM:
            raise UnsupportedError(f"device {self.name}: attention_dense takes head dims <= {MAX_HEAD_DIM}")
        q, k, v = (a if a.rows_contiguous else self.contiguous(a) for a in (q, k, v))
        out = self.empty((t, h, dv), q.dtype)  # (Tq, H, Dv)
        if out.size:
            # one dispatch for the batch: each query row finds its sequence in these prefix sums
            # q_lens, kv_lens (B,) each: their host copies, kept at upload, spare a read-back
            lens = [a.host if a.host is not None else self.download(a) for a in (q_lens, kv_lens)]
            starts = np.zeros((2, len(lens[0]) + 1), dtype=np.int32)  # (2, B + 1)
            np.cumsum(lens, axis=1, out=starts[:, 1:])
            arrays = {"q": q, "k": k, "v": v, "starts": self.upload(starts), "out": out}
            grid_y = min(t, 65535)  # past 65535 rows the grid folds into z
            params = {"q_stride": q.row_stride, "k_stride": k.row_stride, "v_stride": v.row_stride}
            params |= {"rows": t, "batch": len(lens[0]), "heads": h, "kv_heads": k.shape[1]}
            params |= {"dk": dk, "dv": dv}
            params |= {"causal": int(bool(causal)), "window": max(0, int(window)), "grid_y": grid_y}
            # the bias is read as f32 whatever q's dtype; any buffer fills the binding without it
            arrays["rel"] = k if rel_bias is None else self.contiguous(rel_bias, "f32")  # (H, 2R + 1)
            params |= {"has_rel": int(rel_bias is not None)}
            params |= {"rel_width": 1 if rel_bias is None else rel_bias.shape[1]}
            self._run("attention_dense", arrays, params | {"scale": scale}, (h, grid_y, -(-t // grid_y)))
        return out

    # ---- elementwise --------------------------------------------------------------------------------
    def softmax(self, x: Array) -> Array:
        rows = self._rows(x)
        out = self.empty(rows.shape, x.dtype)  # (R, N)
        if out.size:
            params = {"n": rows.shape[1], "x_stride": rows.row_stride}
            self._run("softmax", {"x": rows, "out": out}, params, (rows.shape[0], 1, 1))
        return out.reshape(x.shape)

    def glu(self, gate: Array, up: Array, kind: str) -> Array:
        kind_id = _activation_id(kind)
        fused = self.fused_glu(gate, up, kind)
        if fused is not None:
            return fused
        g, u = self._rows(gate), self._rows(up, gate.dtype)
        out = self.empty(g.shape, gate.dtype)  # (T, F)
        if out.size:
            params = {"dim": g.shape[1], "gate_stride": g.row_stride, "up_stride": u.row_stride}
            self._run(
                "glu",
                {"gate": g, "up": u, "out": out},
                params,
                (_groups(g.shape[1]), g.shape[0], 1),
                KIND=kind_id,
            )
        return out.reshape(gate.shape)

    def act(self, x: Array, kind: str, slope: float = 0.01) -> Array:
        kind_id = _activation_id(kind)
        x = self.contiguous(x)
        out = self.empty(x.shape, x.dtype)
        if out.size:
            params = {"n": x.size, "slope": slope}
            self._run("act", {"x": x, "out": out}, params, grid_1d(_groups(x.size)), KIND=kind_id)
        return out

    def binary(self, op: str, a: Array, b: Array) -> Array:
        if op not in BINARY_OPS:
            raise ConfigError(f"binary op {op!r} is unknown; use one of {BINARY_OPS}")
        if not isinstance(b, WgpuArray):
            b = self.upload(np.asarray(b, dtype=np.float32), a.dtype)
        b = b if b.dtype == a.dtype else self.contiguous(b, a.dtype)
        out = self.empty(a.shape, a.dtype)
        if out.size:
            shape, a_strides = _four_dims(a.shape, a.strides)
            _, b_strides = _four_dims(a.shape, _broadcast_strides(b, a.shape))
            params = {"n": a.size, "d1": shape[1], "d2": shape[2], "d3": shape[3]}
            params |= {f"a{i}": s for i, s in enumerate(a_strides)} | {
                f"b{i}": s for i, s in enumerate(b_strides)
            }
            self._run(
                "binary",
                {"a": a, "b": b, "out": out},
                params,
                grid_1d(_groups(a.size)),
                OP=BINARY_OPS.index(op),
            )
            if op == "add" and a.ndim == 2 and a.shape == b.shape and a.rows_contiguous and b.rows_contiguous:
                self.note_fusable("add", out=out, a=a, b=b)
        return out

    # ---- capability ---------------------------------------------------------------------------------
    def kernels_own_threads(self) -> AbstractContextManager:
        return nullcontext()  # no library thread pool beside this backend's

    def hold_packed(self, fmt: str) -> None:
        """Nothing to decide here: every packed format has its shaders (base.Backend.hold_packed)."""

    def supports(self, op: str, dtype: str | None = None, fmt: str | None = None) -> bool:
        dtype_ok = dtype is None or dtype in self.act_dtypes
        # packed kernels take f32 activations; an f16 model gets its quantized weights dequantized at load
        packed_ok = fmt is None or (
            op in ("matmul", "embed", "matmul_experts") and fmt in self.weight_formats and dtype != "f16"
        )
        return op in OPS and dtype_ok and packed_ok


def _activation_id(kind: str) -> int:
    if kind not in ACTIVATIONS:
        raise ConfigError(f"activation {kind!r} is unknown; use one of {ACTIVATIONS}")
    return ACTIVATIONS.index(kind)


def _broadcast_strides(b: WgpuArray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """b's strides for numpy broadcasting to shape: 0 on new and size-1 axes."""
    if b.ndim > len(shape):
        raise ConfigError(f"binary: cannot broadcast shape {b.shape} to {shape}")
    pad = len(shape) - b.ndim
    strides = [0] * pad
    for n, stride, want in zip(b.shape, b.strides, shape[pad:], strict=True):
        if n not in (1, want):
            raise ConfigError(f"binary: cannot broadcast shape {b.shape} to {shape}")
        strides.append(stride if n == want else 0)
    return tuple(strides)


def _four_dims(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides as exactly 4 axes (leading size-1 axes added) for the strided kernels."""
    if len(shape) > 4:
        raise UnsupportedError(f"wgpu strided kernels take up to 4 axes, not shape {shape}")
    pad = 4 - len(shape)
    return (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
