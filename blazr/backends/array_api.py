"""Every op of backends/base.py written once against an array module `xp` (numpy here, CuPy later).

Subclasses set `xp`, `name` and `compute_dtype`; the CuPy backend overrides `_host` and the hot ops
(CuPy's `get_array_module` idiom). Scalars are passed as Python floats so float32 arrays never promote to
float64 (NEP 50: Python scalars are weakly typed, numpy float64 scalars are not).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from blazr.backends.array_api_conv import ConvOps
from blazr.backends.array_api_relative import RelativeAttentionOps
from blazr.backends.array_api_speech import SpeechOps
from blazr.backends.array_api_ssm import SSMOps
from blazr.backends.base import (
    ACTIVATIONS,
    BINARY_OPS,
    BINARY_UFUNCS,
    HALF_MAX,
    OPS,
    ROPE_STYLES,
    Array,
    SampleParams,
)
from blazr.errors import ConfigError, UnsupportedError

_ATTN_CHUNK_ELEMS = 1 << 23  # cap on one query chunk's score tensor (32 MiB of f32) during long prefills
_SAMPLE_PREFIXES = (64, 1024)  # candidate counts tried before sorting the whole vocabulary
# Abramowitz & Stegun 7.1.26 erf coefficients (|error| <= 1.5e-7): numpy has no erf of its own.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


class ArrayAPIBackend(ConvOps, RelativeAttentionOps, SpeechOps, SSMOps):
    """Shared numpy/CuPy implementation of the backend contract."""

    xp: Any = np  # the array module
    name = "array_api"
    compute_dtype = "f32"  # activation dtype of every op
    act_dtypes: tuple[str, ...] = ("f32",)  # activation dtypes supports() accepts
    weight_formats: tuple[str, ...] = ()  # quantized weight formats supports() accepts

    # ---- memory -------------------------------------------------------------------------------------
    def _dtype(self, dtype: str):
        table = {"f32": self.xp.float32, "f16": self.xp.float16, "i32": self.xp.int32}
        if dtype not in table:
            raise UnsupportedError(f"device {self.name} has no {dtype!r} arrays; use one of {list(table)}")
        return table[dtype]

    def _host(self, a: Array) -> np.ndarray:
        """A host numpy view of a device array (numpy: the array itself)."""
        return np.asarray(a)

    def upload(self, a: np.ndarray, dtype: str | None = None) -> Array:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            target = self._dtype(dtype or self.compute_dtype)
        elif a.dtype.kind in "iub":
            target = self.xp.int32
        else:
            raise UnsupportedError(f"device {self.name} cannot upload an array of dtype {a.dtype}")
        # A read-only host array (an mmap'd checkpoint) cannot change under us, so it is shared, not copied.
        if self.xp is np and not a.flags.writeable and a.dtype == target and a.flags.c_contiguous:
            return a
        return self.xp.array(a, dtype=target, order="C", copy=True)

    def download(self, a: Array) -> np.ndarray:
        return np.array(self._host(a))  # np.array copies, so the caller can never alias device memory

    def empty(self, shape: tuple[int, ...], dtype: str = "f32") -> Array:
        return self.xp.empty(shape, dtype=self._dtype(dtype))

    def sync(self) -> None:
        """numpy runs each op to completion before returning, so nothing is ever queued."""

    # ---- linear algebra -----------------------------------------------------------------------------
    def embed(self, table: Array, ids: Array) -> Array:
        return self.xp.take(self._dense(table, "embed"), ids, axis=0)  # (T, D)

    def matmul(self, x: Array, w: Array) -> Array:
        # w.T is a strided view: BLAS gets a transposed-operand flag, w is never copied.
        return self.xp.matmul(x, self._dense(w, "matmul").T)  # (T, N)

    def matmul_experts(self, x: Array, w: Array, expert_ids: Array) -> Array:
        xp = self.xp
        w = self._dense(w, "matmul_experts")
        t, k = expert_ids.shape
        out = xp.empty((t, k, w.shape[1]), dtype=x.dtype)  # (T, k, N)
        # One matmul per expert over all (token, slot) pairs routed to it.
        for e in self._host(xp.unique(expert_ids)).tolist():
            rows, slots = xp.nonzero(expert_ids == e)
            out[rows, slots] = xp.matmul(x[rows], w[e].T)
        return out

    def _dense(self, w: Any, op: str) -> Array:
        if not isinstance(w, self.xp.ndarray):
            fmt = getattr(w, "format", type(w).__name__)
            raise UnsupportedError(f"device {self.name} does not support {op} on {fmt} weights")
        return w

    # ---- normalisation ------------------------------------------------------------------------------
    def rms_norm(self, x: Array, w: Array, eps: float) -> Array:
        xp = self.xp
        # einsum sums squares without a (T, D) temporary: this op runs twice per layer per token
        ms = xp.einsum("td,td->t", x, x)[:, None] * (1.0 / x.shape[-1])  # (T, 1)
        out = x * (1.0 / xp.sqrt(ms + float(eps)))  # (T, D)
        out *= w
        return out

    def layer_norm(self, x: Array, w: Array, b: Array | None, eps: float) -> Array:
        xp = self.xp
        out = x - xp.mean(x, axis=-1, keepdims=True)  # (T, D) centred
        var = xp.mean(xp.square(out), axis=-1, keepdims=True)  # (T, 1)
        out *= 1.0 / xp.sqrt(var + float(eps))
        out *= w
        if b is not None:
            out += b
        return out

    # ---- attention ----------------------------------------------------------------------------------
    def rope(
        self, x: Array, positions: Array, inv_freq: Array, style: str, rot_dim: int | None = None
    ) -> Array:
        xp = self.xp
        if style not in ROPE_STYLES:
            raise ConfigError(f"rope style {style!r} is unknown; use one of {ROPE_STYLES}")
        dh = x.shape[-1]
        r = dh if rot_dim is None else int(rot_dim)
        cos, sin = self._rope_table(positions, inv_freq, x.dtype)  # (T, 1, R/2) each
        if style == "neox":
            first, second = slice(0, r // 2), slice(r // 2, r)  # feature i pairs with i + R/2
        else:
            first, second = slice(0, r, 2), slice(1, r, 2)  # feature 2i pairs with 2i + 1
        x1, x2 = x[..., first], x[..., second]  # (T, H, R/2) each
        out = xp.empty_like(x)  # (T, H, Dh)
        out[..., first] = x1 * cos - x2 * sin
        out[..., second] = x2 * cos + x1 * sin
        if r < dh:
            out[..., r:] = x[..., r:]
        return out

    def _rope_table(self, positions: Array, inv_freq: Array, dtype) -> tuple[Array, Array]:
        """cos and sin of p * inv_freq, (T, 1, R/2) each. Every layer of a step passes the same positions and
        inv_freq arrays, so the last table is kept and reused while both arguments are the same objects."""
        key = (positions, inv_freq, dtype)
        cached = getattr(self, "_rope_cache", None)
        if cached is not None and all(a is b for a, b in zip(cached[0], key, strict=True)):
            return cached[1]
        xp = self.xp
        # Angles in float64: p * inv_freq at p ~ 1e4 loses ~1e-3 rad in float32; the table is tiny.
        angles = positions.astype(xp.float64)[:, None] * inv_freq.astype(xp.float64)[None, :]  # (T, R/2)
        table = xp.cos(angles).astype(dtype)[:, None, :], xp.sin(angles).astype(dtype)[:, None, :]
        self._rope_cache = (key, table)  # holds the key arrays, so their ids cannot be reused meanwhile
        return table

    def kv_write(self, k_cache: Array, v_cache: Array, k: Array, v: Array, slots: Array) -> None:
        if k_cache.dtype == self.xp.float16:  # a float16 cache saturates at its range instead of holding inf
            k, v = self.xp.clip(k, -HALF_MAX, HALF_MAX), self.xp.clip(v, -HALF_MAX, HALF_MAX)
        k_cache[slots] = k
        v_cache[slots] = v

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
        xp = self.xp
        out = xp.empty_like(q)  # (T, H, Dh)
        tables = self._host(block_tables)  # (B, max_blocks)
        q_start = 0
        lens = zip(self._host(ctx_lens).tolist(), self._host(q_lens).tolist(), strict=True)
        for b, (ctx, n) in enumerate(lens):
            # Keys older than the window are never seen by this step's first query, so skip them.
            k_lo = max(0, ctx - n - window + 1) if window > 0 else 0
            keys = self._gather_kv(k_cache, tables[b], k_lo, ctx, block_size)  # (Lk, Hkv, Dh)
            values = self._gather_kv(v_cache, tables[b], k_lo, ctx, block_size)  # (Lk, Hkv, Dh)
            if keys.dtype != q.dtype:  # a float16 cache under float32 queries: computed in float32
                keys, values = keys.astype(q.dtype), values.astype(q.dtype)
            # ALiBi: slope * key position, the same for every query of the sequence
            pos_bias = (
                None if alibi is None else alibi[:, None] * xp.arange(k_lo, ctx, dtype=xp.float32)
            )  # (H, Lk)
            chunk = max(1, _ATTN_CHUNK_ELEMS // (q.shape[1] * (ctx - k_lo)))
            for c0 in range(0, n, chunk):
                c1 = min(n, c0 + chunk)
                # A lone (decode) query sees every key kept above, whose range already applies the window.
                bias = None if n == 1 else self._step_bias(ctx, n, c0, c1, k_lo, window)
                out[q_start + c0 : q_start + c1] = self._attend(
                    q[q_start + c0 : q_start + c1],
                    keys,
                    values,
                    bias,
                    float(scale),
                    float(softcap),
                    pos_bias,
                    sinks,
                )
            q_start += n
        return out

    def _gather_kv(self, cache: Array, table: np.ndarray, lo: int, hi: int, block_size: int) -> Array:
        """Cache rows for positions lo..hi-1 of one sequence: a slice view when its blocks are consecutive."""
        blocks = table[lo // block_size : -(-hi // block_size)]  # (nb,)
        skip = lo % block_size
        if (blocks == blocks[0] + np.arange(len(blocks))).all():
            start = int(blocks[0]) * block_size + skip
            return cache[start : start + hi - lo]
        paged = cache.reshape(-1, block_size, *cache.shape[1:])  # (num_blocks, bs, Hkv, Dh)
        rows = paged[self.xp.asarray(blocks)].reshape(-1, *cache.shape[1:])  # (nb * bs, Hkv, Dh)
        return rows[skip : skip + hi - lo]

    def _step_bias(self, ctx: int, n: int, c0: int, c1: int, k_lo: int, window: int) -> Array | None:
        q_pos = np.arange(ctx - n + c0, ctx - n + c1)  # (nc,) positions of these queries
        return self._mask_bias(q_pos, np.arange(k_lo, ctx), window)

    def _mask_bias(self, q_pos: np.ndarray, k_pos: np.ndarray, window: int) -> Array | None:
        """(nc, Lk) additive bias: -inf where a key is in a query's future or outside its window, or None."""
        masked = k_pos[None, :] > q_pos[:, None]  # (nc, Lk)
        if window > 0:
            masked |= q_pos[:, None] - k_pos[None, :] >= window
        if not masked.any():
            return None
        return self.xp.asarray(np.where(masked, -np.inf, 0.0).astype(np.float32))

    def _attend(
        self,
        q: Array,
        keys: Array,
        values: Array,
        bias: Array | None,
        scale: float,
        softcap: float,
        pos_bias: Array | None = None,
        sinks: Array | None = None,
    ):
        """q (nc, H, Dh), keys/values (Lk, Hkv, Dh) -> (nc, H, Dh); heads grouped, so K/V are not repeated.
        bias (nc, Lk) masks per query; pos_bias (H, Lk), ALiBi's, is added per head before the soft-cap;
        sinks (H,) are per-head logits in the softmax's sum only."""
        xp = self.xp
        nc, h, dh = q.shape
        hkv = keys.shape[1]
        g = h // hkv
        qg = q.reshape(nc, hkv, g, dh).transpose(1, 2, 0, 3).reshape(hkv, g * nc, dh)  # (Hkv, G*nc, Dh)
        scores = xp.matmul(qg, keys.transpose(1, 2, 0))  # (Hkv, G*nc, Lk)
        scores *= scale
        if pos_bias is not None:
            by_head = scores.reshape(hkv, g, nc, -1)  # (Hkv, G, nc, Lk) view: head h = kv * G + g
            by_head += pos_bias.reshape(hkv, g, 1, -1)
        if softcap > 0:
            scores *= 1.0 / softcap
            xp.tanh(scores, out=scores)
            scores *= softcap
        if bias is not None:
            by_query = scores.reshape(hkv, g, nc, -1)  # (Hkv, G, nc, Lk) view: bias broadcasts per query
            by_query += bias
        top = xp.max(scores, axis=-1, keepdims=True)  # (Hkv, G*nc, 1)
        if sinks is not None:
            sink = xp.repeat(sinks.reshape(hkv, g, 1), nc, axis=2).reshape(hkv, g * nc, 1)  # (Hkv, G*nc, 1)
            top = xp.maximum(top, sink)
        scores -= top
        xp.exp(scores, out=scores)
        denom = xp.sum(scores, axis=-1, keepdims=True)  # (Hkv, G*nc, 1)
        if sinks is not None:
            denom += xp.exp(sink - top)
        out = xp.matmul(scores, values.transpose(1, 0, 2))  # (Hkv, G*nc, Dh)
        out /= denom  # normalising the (.., Dv) output is cheaper than the (.., Lk) probabilities
        dv = values.shape[-1]
        return out.reshape(hkv, g, nc, dv).transpose(2, 0, 1, 3).reshape(nc, h, dv)

    def attention_dense(
        self,
        q: Array,
        k: Array,
        v: Array,
        q_lens: Array,
        kv_lens: Array,
        scale: float,
        causal: bool = False,
        window: int = 0,
        rel_bias: Array | None = None,
    ) -> Array:
        xp = self.xp
        out = xp.zeros((q.shape[0], q.shape[1], v.shape[2]), dtype=q.dtype)  # (Tq, H, Dv)
        rel = None if rel_bias is None else np.asarray(self._host(rel_bias), dtype=np.float32)  # (H, 2R + 1)
        q0 = k0 = 0
        for nq, nk in zip(self._host(q_lens).tolist(), self._host(kv_lens).tolist(), strict=True):
            keys, values = k[k0 : k0 + nk], v[k0 : k0 + nk]  # (nk, Hkv, Dk), (nk, Hkv, Dv)
            chunk = max(1, _ATTN_CHUNK_ELEMS // (q.shape[1] * max(nk, 1)))
            for c0 in range(0, nq if nk else 0, chunk):
                c1 = min(nq, c0 + chunk)
                q_pos = np.arange(nk - nq + c0, nk - nq + c1)  # (nc,) positions of these queries
                masked = self._dense_mask(q_pos, nk, causal, window)  # (nc, nk) or None
                blind = None if masked is None else masked.all(axis=1)  # (nc,) queries that see no key
                if blind is not None:
                    masked[blind] = False  # attend anywhere, then zero those rows: no 0/0 in the softmax
                bias = (
                    None if masked is None else np.where(masked, -np.inf, 0.0).astype(np.float32)
                )  # (nc, nk)
                if rel is not None:  # (H, nc, nk): per head, viewed by _attend as (Hkv, G, nc, nk)
                    reach = (rel.shape[1] - 1) // 2
                    offsets = np.clip(np.arange(nk)[None, :] - q_pos[:, None], -reach, reach) + reach
                    bias = rel[:, offsets] if bias is None else rel[:, offsets] + bias
                    bias = bias.reshape(k.shape[1], q.shape[1] // k.shape[1], len(q_pos), nk)
                bias = None if bias is None else xp.asarray(bias)
                rows = self._attend(q[q0 + c0 : q0 + c1], keys, values, bias, float(scale), 0.0)
                if blind is not None and blind.any():
                    rows[xp.asarray(blind)] = 0.0
                out[q0 + c0 : q0 + c1] = rows
            q0, k0 = q0 + nq, k0 + nk
        return out

    @staticmethod
    def _dense_mask(q_pos: np.ndarray, nk: int, causal: bool, window: int) -> np.ndarray | None:
        """(nc, nk) bool: True where attention_dense hides key j from the query at q_pos[i]; None if none."""
        k_pos = np.arange(nk)
        masked = np.zeros((len(q_pos), nk), dtype=bool)
        if causal:
            masked |= k_pos[None, :] > q_pos[:, None]
        if window > 0:
            masked |= np.abs(q_pos[:, None] - k_pos[None, :]) >= window
        return masked if masked.any() else None

    # ---- elementwise --------------------------------------------------------------------------------
    def softmax(self, x: Array) -> Array:
        xp = self.xp
        out = x - xp.max(x, axis=-1, keepdims=True)
        xp.exp(out, out=out)
        out /= xp.sum(out, axis=-1, keepdims=True)
        return out

    def glu(self, gate: Array, up: Array, kind: str) -> Array:
        out = self.act(gate, kind)
        out *= up
        return out

    def act(self, x: Array, kind: str, slope: float = 0.01) -> Array:
        xp = self.xp
        if kind == "silu":
            # x / (1 + exp(-x)); clamping -x at 88 keeps exp finite in f32 and changes nothing visible.
            out = xp.minimum(-x, 88.0)
            xp.exp(out, out=out)
            out += 1.0
            return xp.divide(x, out, out=out)
        if kind == "gelu":
            out = self._erf(x * (1.0 / math.sqrt(2.0)))
            out += 1.0
            out *= x
            out *= 0.5
            return out
        if kind == "gelu_tanh":
            out = x * x
            out *= 0.044715 * x
            out += x
            out *= math.sqrt(2.0 / math.pi)
            xp.tanh(out, out=out)
            out += 1.0
            out *= 0.5 * x
            return out
        if kind == "relu":
            return xp.maximum(x, 0)
        if kind == "tanh":
            return xp.tanh(x)
        if kind in ("sigmoid", "softplus"):
            e = xp.exp(-xp.abs(x))  # e^-|x| in (0, 1]: never overflows
            if kind == "softplus":  # log(1 + e^x) = max(x, 0) + log(1 + e^-|x|)
                xp.log1p(e, out=e)
                e += xp.maximum(x, 0.0)
                return e
            out = xp.where(x >= 0, 1.0, e)  # sigmoid: 1 / (1 + e^-x), or e^x / (1 + e^x) below 0
            e += 1.0
            out /= e
            return out
        if kind == "exp":
            return xp.exp(x)
        if kind == "leaky_relu":
            return xp.where(x >= 0, x, x * float(slope))
        if kind == "sin":
            return xp.sin(x)
        raise ConfigError(f"activation {kind!r} is unknown; use one of {ACTIVATIONS}")

    def _erf(self, z: Array) -> Array:
        """erf(z) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), in z's dtype."""
        xp = self.xp
        a = xp.abs(z)
        t = 1.0 / (1.0 + _ERF_P * a)
        poly = _ERF_A[4] * t
        for coef in _ERF_A[3::-1]:
            poly += coef
            poly *= t
        out = xp.exp(-(a * a))
        out *= poly
        out = 1.0 - out
        return xp.copysign(out, z, out=out)

    def binary(self, op: str, a: Array, b: Array) -> Array:
        if op not in BINARY_UFUNCS:
            raise ConfigError(f"binary op {op!r} is unknown; use one of {BINARY_OPS}")
        return getattr(self.xp, BINARY_UFUNCS[op])(a, b)

    # ---- selection ----------------------------------------------------------------------------------
    def topk(self, x: Array, k: int) -> tuple[Array, Array]:
        xp = self.xp
        # A stable sort of -x puts the largest first and ties in index order.
        idx = xp.argsort(-x, axis=-1, kind="stable")[:, :k]  # (B, k)
        return xp.take_along_axis(x, idx, axis=-1), idx.astype(xp.int32)

    def sample(self, logits: Array, params: SampleParams) -> Array:
        xp = self.xp
        temps = np.asarray(params.temperature)
        ids = np.empty(logits.shape[0], dtype=np.int32)  # (B,)
        if (temps <= 0).any():
            greedy = self._host(xp.argmax(logits, axis=-1))  # (B,)
            ids[temps <= 0] = greedy[temps <= 0]
        for b in np.nonzero(temps > 0)[0].tolist():
            knobs = int(params.top_k[b]), float(params.top_p[b]), float(params.min_p[b])
            ids[b] = self._sample_row(logits[b] / float(temps[b]), *knobs, float(params.uniform[b]))
        return xp.asarray(ids)

    def _sample_row(self, logits: Array, top_k: int, top_p: float, min_p: float, uniform: float) -> int:
        """One row of already temperature-scaled logits (V,) -> token id."""
        xp = self.xp
        vocab = logits.shape[0]
        top = float(xp.max(logits))
        if 0 < top_k < vocab:
            cand = self._top_ids(logits, int(top_k))[: int(top_k)]  # (k,)
            probs = xp.exp(logits[cand].astype(xp.float64) - top)  # (k,) unnormalised
            return int(cand[_pick(self._host(probs / probs.sum()), top_p, min_p, uniform, True)])
        z = float(xp.sum(xp.exp(logits - top), dtype=xp.float64))
        # Most of the time the answer lies among the few most likely tokens: sort only those when it does.
        for size in (*[s for s in _SAMPLE_PREFIXES if s < vocab], vocab):
            cand = self._top_ids(logits, size)  # (>= size,) descending, ties by lower id
            probs = self._host(xp.exp(logits[cand].astype(xp.float64) - top) / z)
            j = _pick(probs, top_p, min_p, uniform, complete=len(cand) == vocab)
            if j is not None:
                return int(cand[j])
        raise AssertionError("unreachable: the full vocabulary always settles the pick")

    def _top_ids(self, x: Array, size: int) -> Array:
        """Ids of the `size` largest entries of x (V,) plus ties of the smallest; descending, ties by id."""
        xp = self.xp
        if size >= x.shape[0]:
            return xp.argsort(-x, kind="stable")
        kth = xp.partition(x, x.shape[0] - size)[x.shape[0] - size]
        cand = xp.nonzero(x >= kth)[0]  # ascending ids, so the stable sort below keeps ties by id
        return cand[xp.argsort(-x[cand], kind="stable")]

    # ---- sequence (conv1d, conv_transpose1d: array_api_conv.ConvOps; causal_conv1d, ssm_scan: SSMOps) -----
    def transpose(self, x: Array) -> Array:
        return self.xp.ascontiguousarray(x.T)  # (N, M)

    # ---- capability ---------------------------------------------------------------------------------
    def kernels_own_threads(self) -> AbstractContextManager:
        return nullcontext()  # no library thread pool beside this backend's

    def hold_packed(self, fmt: str) -> None:
        """Nothing to decide here (base.Backend.hold_packed)."""

    def supports(self, op: str, dtype: str | None = None, fmt: str | None = None) -> bool:
        dtype_ok = dtype is None or dtype in self.act_dtypes
        fmt_ok = fmt is None or fmt in self.weight_formats
        return op in OPS and dtype_ok and fmt_ok


def _pick(probs: np.ndarray, top_p: float, min_p: float, uniform: float, complete: bool) -> int | None:
    """Index into descending probs (normalised over the whole row) of the sampled token, or None when
    probs is a prefix too short to decide (the kept set or the pick may lie past its end)."""
    cum = np.cumsum(probs)  # (n,)
    keep, settled = len(probs), complete
    if top_p < 1.0:
        reach = int(np.searchsorted(cum, top_p))  # first index whose cumulative mass reaches top_p
        if reach < len(probs):
            keep, settled = reach + 1, True
    if min_p > 0.0:
        below = np.nonzero(probs < min_p * probs[0])[0]
        if len(below):
            keep, settled = min(keep, int(below[0])), True
    if not settled and (top_p < 1.0 or min_p > 0.0):
        return None
    mass = cum[keep - 1] if settled else 1.0  # unfiltered: the kept set is the whole row, of mass 1
    j = int(np.searchsorted(cum[:keep], uniform * mass, side="right"))  # first cum > uniform * mass
    if j < keep:
        return j
    return keep - 1 if settled else None
