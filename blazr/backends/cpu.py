"""The numpy backend: float32 compute on the host, every op from ArrayAPIBackend with xp = numpy.

Quantized GGUF weights stay packed (blazr.quant.QuantWeight): matmul and embed read the blocks with the
numba kernels of blazr.quant.cpu_kernels when numba is installed, else with the numpy reference path.
With numba, RMSNorm, RoPE, KV writes and decode attention run as one-pass kernels (blazr.backends.cpu_ops),
and the state-space-model ops as blazr.backends.cpu_ssm's.
"""

from __future__ import annotations

import importlib.util
import math
import weakref
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from blazr.backends.array_api import ArrayAPIBackend
from blazr.backends.base import ACTIVATIONS, ROPE_STYLES, Array, as_half_bits
from blazr.errors import ConfigError
from blazr.quant import DEQUANT_TYPES, INTERNAL_TYPES, QuantRowStack, QuantWeight
from blazr.quant.experts import QuantExperts

_NO_BIAS = np.zeros(0, dtype=np.float32)  # layer_norm's kernel without a bias

# Every GGML block type the numpy dequantizer decodes can be multiplied packed (F16/BF16 are widened at load),
# and so can blazr's own formats (I4Z: AWQ/GPTQ int4).
PACKED_FORMATS = tuple(sorted((DEQUANT_TYPES - {"F32", "F16", "BF16"}) | set(INTERNAL_TYPES)))
HAS_NUMBA = importlib.util.find_spec("numba") is not None


_BLAS_CONTROL = None  # threadpoolctl's view of numpy's BLAS, made on first use (kernels_own_threads)
KV_DTYPES = (np.float32, np.float16)  # KV-cache element types the numba kernels read and write (half_bits)
PARALLEL_DECODE_SEQS = 8  # from this many sequences a decode step attends on numba's pool (see attention)
SERIAL_MACS = 1 << 21  # a dense matmul this small may run on the calling thread (see numba_matmul_rows)
STREAMED_ROWS = 12  # a larger one of at most this many rows may run on numba's pool (ditto)
# dense float32 weights up to this size stay on numba's pool for prompts too, once packed kernels run there: a
# Qwen3-MoE-shaped Q4_K_M model's F32 routers on OpenBLAS took 5.5 ms a layer for 128 tokens (the two pools
# spinning against each other), against ~0.5 ms in numba
NUMBA_DENSE_WEIGHTS = 1 << 22


class Backend(ArrayAPIBackend):
    """`--device cpu`: numpy arrays are the device arrays; dense matmuls go to numpy's BLAS."""

    xp = np
    name = "cpu"
    compute_dtype = "f32"
    act_dtypes = ("f32",)
    weight_formats = PACKED_FORMATS

    def __init__(self, index: int = 0, fast_kernels: bool | None = None, **options):
        """fast_kernels: use the numba kernels (default: when numba is installed); False: numpy reference."""
        if index != 0:
            raise ConfigError(f"--device cpu:{index}: the cpu backend has one device; use --device cpu")
        if options:
            raise ConfigError(f"--device cpu: unknown backend option(s) {sorted(options)}")
        if fast_kernels and not HAS_NUMBA:
            raise ConfigError("fast CPU kernels need numba; install it with: pip install numba")
        self.fast_kernels = HAS_NUMBA if fast_kernels is None else bool(fast_kernels)
        self._quant_modules: dict = {}  # format -> its kernel module (_quant_module)
        # QuantWeight -> its decode matmul (cpu_lane_matmul.LaneMatmul) or None, while int8 activations are on
        self._lane_matmuls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # round activations to int8 for matmuls with packed weights (blazr.quant.cpu_int8_dots, cpu_int8_gemm):
        # by default where the CPU has the int8 GEMM for prompts (VNNI or AVX2), since a token must round the
        # same way whatever batch it is in, and the int8 row dots alone would make prompts 3-4x slower
        self._int8_gemm = self.fast_kernels and _int8_gemm_available()
        self.int8_activations = self._int8_gemm
        # set when a model holding weights in the numba kernels' formats loads (hold_packed; or at the first
        # packed matmul of a weight made without the loader): its packed matmuls run on numba's thread pool,
        # and its small dense matmuls join them there
        self._numba_pool = False
        # dense float32 matmuls of at most this many rows run in numba, not OpenBLAS (0: never): of SERIAL_MACS
        # multiply-adds on one thread, larger of <= STREAMED_ROWS rows on numba's pool. Whisper's decoder sets it
        # (blazr.tasks.transcribe): OpenBLAS's thread hand-off cost more than such work, its spinning threads
        # stalled a busy machine, and for 5 beams its head took 16 ms to numba's 6.5 (4.1 / 3.0 for one row).
        self.numba_matmul_rows = 0
        # set once a packed matmul rounds x to int8 where the int8 GEMM runs: prompts then run all their packed
        # matmuls (IQ formats too, cpu_f32_gemm), attention and SiLU products on numba's pool instead of waking
        # OpenBLAS's (blazr.backends.cpu_attention, cpu_kernels.path). It depends on the model and the dtype
        # only, never on the batch, so a token takes the same kernels alone and in any batch.
        self._numba_prefill = False
        self._ops = None
        self._dense_attention = None  # blazr.backends.cpu_dense_attention with numba
        if self.fast_kernels:
            from blazr.backends import cpu_dense_attention, cpu_ops

            self._ops = cpu_ops
            self._dense_attention = cpu_dense_attention

    def _quant_module(self, fmt: str):
        """The kernel module for one format: numba kernels where they exist, else the numpy reference (looked
        up once per format: every packed matmul of a decode step asks)."""
        found = self._quant_modules.get(fmt)
        if found is None:
            found = self._quant_modules[fmt] = self._find_quant_module(fmt)
        return found

    def _find_quant_module(self, fmt: str):
        if self.fast_kernels:
            from blazr.quant import cpu_kernels

            if fmt in cpu_kernels.FORMATS:
                return cpu_kernels
        from blazr.quant import reference_matmul

        return reference_matmul

    def set_int8_activations(self, enabled: bool) -> None:
        """--dtype q8 (True) or an explicit float dtype (False): int8 or exact float32 activations in the
        dot products with packed weights."""
        self.int8_activations = bool(enabled)
        self._lane_matmuls.clear()

    def kernels_own_threads(self) -> AbstractContextManager:
        # OpenBLAS's threads spin for a while after each call, on the cores numba's pool then needs: a VITS
        # voice (numba convolutions, small BLAS products in its text encoder) ran at RTF 0.101 with both
        # pools at two threads and 0.047 with BLAS at one (Intel Xeon, 2 cores)
        if not self.fast_kernels:
            return nullcontext()
        global _BLAS_CONTROL
        if _BLAS_CONTROL is None:
            from threadpoolctl import ThreadpoolController

            _BLAS_CONTROL = ThreadpoolController()  # finds the BLAS numpy loaded (OpenBLAS, MKL, ...) once
        return _BLAS_CONTROL.limit(limits=1, user_api="blas")

    def hold_packed(self, fmt: str) -> None:
        # at load, not at the first packed matmul: a dense matmul before it (a mixture's router in the first
        # layer, under float32 attention) took OpenBLAS in the first forward and numba's pool in every later
        # one, so a process's first answer differed in the last bits from the same request's later ones
        if self._quant_module(fmt).__name__.endswith("cpu_kernels"):
            self._numba_pool = True

    def supports(self, op: str, dtype: str | None = None, fmt: str | None = None) -> bool:
        # only the matmuls and embed read weights, so only they take packed formats
        packed_ops = ("matmul", "embed", "matmul_experts")
        return super().supports(op, dtype, fmt if op in packed_ops else fmt and "unsupported")

    def matmul_experts(self, x: Array, w: Array, expert_ids: Array) -> Array:
        if not isinstance(w, QuantExperts):
            return super().matmul_experts(x, w, expert_ids)
        t, k = expert_ids.shape
        out = np.empty((t * k, w.shape[1]), dtype=np.float32)  # (T k, N): row t k + j is token t's slot j
        if not out.size:
            return out.reshape(t, k, w.shape[1])
        flat = np.asarray(expert_ids).reshape(-1)  # (T k,)
        if self._lane_experts(w, flat):
            from blazr.quant.cpu_int8_experts import matmul_quant_experts_lanes

            self._numba_pool = True
            matmul_quant_experts_lanes(x, w, flat, k, out)
            return out.reshape(t, k, w.shape[1])
        order = np.argsort(flat, kind="stable")  # (T k,) pairs grouped by expert
        starts = np.flatnonzero(np.diff(flat[order])) + 1
        # one packed matmul per active expert over every token routed to it
        for pairs in np.split(order, starts):
            out[pairs] = self.matmul(x[pairs // k], w.expert(int(flat[pairs[0]])))  # (n_e, N)
        return out.reshape(t, k, w.shape[1])

    def _lane_experts(self, w: QuantExperts, flat: np.ndarray) -> bool:
        """Whether every expert's tokens would take the int8 lane dots one matmul each (decode steps): then
        one call over all pairs gives the same bits (blazr.quant.cpu_int8_experts) without a thread-pool
        launch per expert."""
        if not (self.fast_kernels and self.int8_activations):
            return False
        from blazr.quant import cpu_kernels

        most = int(np.bincount(flat).max())  # the busiest expert's rows
        return all(cpu_kernels.path(most, p.format, True) == "int8-lanes" and p.perm is None for p in w.parts)

    def matmul(self, x: Array, w: Array) -> Array:
        # set at w's first int8 call (a stack's once its parts have theirs)
        decode = self._lane_matmuls.get(w) if type(w) is QuantWeight or type(w) is QuantRowStack else None
        if (
            decode is not None
            and x.shape[0] < decode.max_tokens
            and x.dtype == np.float32
            and x.flags.c_contiguous
        ):
            return decode(x)  # (T, N) a decode step's packed matmul, its kernel chosen once
        if isinstance(w, QuantRowStack):
            out = np.concatenate([self.matmul(x, part) for part in w.parts], axis=1)  # (T, N)
            if w not in self._lane_matmuls and all(self._lane_matmuls.get(p) for p in w.parts):
                self._lane_matmuls[w] = self._quant_module(w.parts[0].format).stacked_lane_matmul(w)
            return out
        if isinstance(w, QuantWeight):
            x = x if w.perm is None else x[:, w.perm]  # (T, K) in the packed column order (GPTQ act-order)
            module = self._quant_module(w.format)
            if module.__name__.endswith("cpu_kernels"):
                self._numba_pool = True
                if self.int8_activations and self._int8_gemm:
                    if w not in self._lane_matmuls:  # None for a format without lane dots
                        self._lane_matmuls[w] = module.lane_matmul(w)
                    paths = ("int8", "int8-lanes", "int8-gemm")
                    self._numba_prefill = (
                        self._numba_prefill or module.path(x.shape[0], w.format, True) in paths
                    )
                return module.matmul(x, w, int8=self.int8_activations, blas=not self._numba_prefill)  # (T, N)
            return module.matmul(x, w)  # (T, N)
        if (
            x.shape[0] <= self.numba_matmul_rows
            and x.shape[0] * np.size(w) <= SERIAL_MACS
            and self._ops is not None
            and isinstance(w, np.ndarray)
            and x.dtype == w.dtype == np.float32
            and w.ndim == 2
            and x.shape[-1] == w.shape[1]
        ):
            x = np.ascontiguousarray(x)
            out = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)  # (T, N)
            self._ops.dense_matmul_serial(x, np.asarray(w), out)
            return out
        if (
            self._ops is not None
            and isinstance(w, np.ndarray)
            # few tokens, or a small weight (a mixture's router) at any token count: numba's pool then serves
            # every matmul of a step, and a token's router logits do not depend on its batch; and a large weight
            # for a few rows of a numba_matmul_rows model, each row of w read once for all of x's
            and (
                (self._numba_pool and (x.shape[0] <= 4 or np.size(w) <= NUMBA_DENSE_WEIGHTS))
                or x.shape[0] <= min(self.numba_matmul_rows, STREAMED_ROWS)
            )
            and x.dtype == w.dtype == np.float32
            and w.ndim == 2
            and x.shape[-1] == w.shape[1]
        ):
            x = np.ascontiguousarray(x)
            out = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)  # (T, N)
            self._ops.dense_matmul(x, np.asarray(w), out, max(1, -(-w.shape[0] // 16)))
            return out
        return super().matmul(x, w)

    def embed(self, table: Array, ids: Array) -> Array:
        if isinstance(table, QuantWeight):
            rows = self._quant_module(table.format).embed(table, ids)  # (T, K) in packed column order
            if table.perm is None:
                return rows
            out = np.empty_like(rows)  # (T, K)
            out[:, table.perm] = rows
            return out
        return super().embed(table, ids)

    # ---- one-pass numba kernels for the small per-token ops (float32 only; else the numpy versions) -------
    # The checks are kept to plain attribute tests: in a decode step each line here runs on cold caches.
    def rms_norm(self, x: Array, w: Array, eps: float) -> Array:
        if self._ops is None or x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != 2:
            return super().rms_norm(x, w, eps)
        out = np.empty(x.shape, dtype=np.float32)  # (T, D)
        self._ops.rms_norm(x, w, float(eps), out)
        return out

    def rope(
        self, x: Array, positions: Array, inv_freq: Array, style: str, rot_dim: int | None = None
    ) -> Array:
        if self._ops is None or x.dtype != np.float32 or style not in ROPE_STYLES or x.ndim != 3:
            return super().rope(x, positions, inv_freq, style, rot_dim)
        cos, sin = self._rope_table(positions, inv_freq, np.float32)  # (T, 1, R/2) each
        rot = x.shape[-1] if rot_dim is None else int(rot_dim)
        out = np.empty(x.shape, dtype=np.float32)  # (T, H, Dh)
        self._ops.rope(x, cos[:, 0], sin[:, 0], style == "neox", rot, out)
        return out

    def kv_write(self, k_cache: Array, v_cache: Array, k: Array, v: Array, slots: Array) -> None:
        if (
            self._ops is None
            or k_cache.dtype not in KV_DTYPES
            or v_cache.dtype != k_cache.dtype
            or k.dtype != np.float32
            or slots.dtype != np.int32
        ):
            return super().kv_write(k_cache, v_cache, k, v, slots)
        # a float16 cache as its bits, k and v rounded into it by the kernel (half_bits.to_cache)
        k_cache, v_cache = as_half_bits(k_cache, v_cache)
        self._ops.kv_write(k_cache, v_cache, k, v, slots)

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
        # float32, stride 1, ungrouped (every convolution of HiFi-GAN, VITS's flows and text encoder): the
        # direct kernel on numba's pool (blazr.backends.cpu_conv); the rest im2col + BLAS (array_api_conv)
        if self._ops is None or stride != 1 or groups != 1 or not _all_f32(x, w, b, residual):
            return super().conv1d(x, w, b, stride, pad, groups, dilation, pre_act, slope, residual)
        from blazr.backends import cpu_conv

        kind = cpu_conv.NO_ACT if pre_act is None else ACTIVATIONS.index(pre_act)
        return cpu_conv.conv1d(x, w, b, pad, dilation, kind, slope, residual)

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
        if self._ops is None or groups != 1 or not _all_f32(x, w, b):
            return super().conv_transpose1d(x, w, b, stride, pad, groups, pre_act, slope)
        from blazr.backends import cpu_conv

        kind = cpu_conv.NO_ACT if pre_act is None else ACTIVATIONS.index(pre_act)
        return cpu_conv.conv_transpose1d(x, w, b, stride, pad, kind, slope)

    def causal_conv1d(self, x, w, b, states, seq_slots, q_lens, fresh, act="silu") -> Array:
        if (
            self._ops is None
            or not _all_f32(x, w, b, states)
            or not _all_i32(seq_slots, q_lens, fresh)
            or x.ndim != 2
            or not states.flags.c_contiguous
            or (act is not None and act not in ACTIVATIONS)
        ):
            return super().causal_conv1d(x, w, b, states, seq_slots, q_lens, fresh, act)
        from blazr.backends import cpu_ssm
        from blazr.backends.array_api_ssm import check_conv_shapes

        check_conv_shapes(x, w, b, states)
        out = np.empty(x.shape, dtype=np.float32)  # (T, C)
        kind = cpu_ssm.NO_ACT if act is None else ACTIVATIONS.index(act)
        bias = cpu_ssm.NO_BIAS if b is None else b
        cpu_ssm.causal_conv1d(np.ascontiguousarray(x), w, bias, states, seq_slots, q_lens, fresh, kind, out)
        return out

    def ssm_scan(self, x, dt, A, B, C, D, states, seq_slots, q_lens, fresh) -> Array:
        if (
            self._ops is None
            or not _all_f32(x, dt, A, B, C, D, states)
            or not _all_i32(seq_slots, q_lens, fresh)
            or x.ndim != 3
            or A.ndim not in (1, 2)
            or not states.flags.c_contiguous
        ):
            return super().ssm_scan(x, dt, A, B, C, D, states, seq_slots, q_lens, fresh)
        from blazr.backends import cpu_ssm
        from blazr.backends.array_api_ssm import check_scan_shapes

        check_scan_shapes(x, dt, A, B, C, D, states)
        # contiguous inputs (x, B and C are often views of one projection's rows): one compiled layout, so a
        # decode row (contiguous by chance) and a prompt's rows take the same code
        x, dt, B, C = (np.ascontiguousarray(v) for v in (x, dt, B, C))
        rates = np.ascontiguousarray(A.reshape(A.shape[0], -1))  # (H, 1) or (H, N)
        y = np.empty(x.shape, dtype=np.float32)  # (T, H, P)
        # numba's pool where the model's matmuls already run on it (see cpu_ssm); the same numbers either way
        args = (x, dt, rates, B, C, D, states, seq_slots, q_lens, fresh, y)
        if self._numba_pool and x.shape[0] * math.prod(states.shape[1:]) >= cpu_ssm.PARALLEL_SCAN_WORK:
            from blazr.numba_threads import num_threads

            cpu_ssm.ssm_scan_parallel(*args, 4 * num_threads())
        else:
            cpu_ssm.ssm_scan_serial(*args)
        return y

    def layer_norm(self, x: Array, w: Array, b: Array | None, eps: float) -> Array:
        if self._ops is None or x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != 2:
            return super().layer_norm(x, w, b, eps)
        if b is not None and b.dtype != np.float32:
            return super().layer_norm(x, w, b, eps)
        out = np.empty(x.shape, dtype=np.float32)  # (T, D)
        self._ops.layer_norm(x, w, _NO_BIAS if b is None else b, float(eps), out)
        return out

    def act(self, x: Array, kind: str, slope: float = 0.01) -> Array:
        if self._ops is None or kind not in ACTIVATIONS or x.dtype != np.float32 or x.ndim != 2:
            return super().act(x, kind, slope)
        out = np.empty(x.shape, dtype=np.float32)  # (T, F)
        self._ops.act(x, ACTIVATIONS.index(kind), np.float32(slope), out)
        return out

    def glu(self, gate: Array, up: Array, kind: str) -> Array:
        if self._ops is None or gate.dtype != np.float32 or gate.ndim != 2 or up.dtype != np.float32:
            return super().glu(gate, up, kind)
        # contiguous rows whatever the caller's view: numba compiles a strided (T > 1 halves of a fused
        # gate|up matmul) and a contiguous argument (one row) into differently vectorised code, whose exp rounds
        # differently, and a token's output then depended on its batch
        gate, up = np.ascontiguousarray(gate), np.ascontiguousarray(up)
        out = np.empty(gate.shape, dtype=np.float32)  # (T, F)
        if kind != "silu":
            if kind not in ACTIVATIONS:
                return super().glu(gate, up, kind)
            self._ops.glu(gate, up, ACTIVATIONS.index(kind), out)
            return out
        if self._numba_prefill and gate.shape[0] > 1:
            self._ops.silu_mul_parallel(gate, up, out)
        else:
            self._ops.silu_mul(gate, up, out)
        return out

    def attention(
        self,
        q,
        k_cache,
        v_cache,
        block_tables,
        ctx_lens,
        q_lens,
        block_size,
        scale,
        window=0,
        softcap=0.0,
        alibi=None,
        sinks=None,
    ):
        # A decode step (one query per sequence) runs the serial numba kernel, which declines anything else;
        # a prefill runs the parallel one when its matmuls run on numba's pool, else numpy's batched BLAS. A
        # decode step of PARALLEL_DECODE_SEQS or more sequences takes the parallel kernel too: it computes each
        # query exactly as the serial one (the same inlined loop; tests/test_batching_invariants.py), and 16
        # sequences' attention was ~9% of SmolLM2's batched decode step, ~30% less on two threads.
        if (
            self._ops is not None
            and q.dtype == np.float32
            and k_cache.dtype == v_cache.dtype
            and k_cache.dtype in KV_DTYPES
            and block_tables.dtype == ctx_lens.dtype == q_lens.dtype == np.int32
            and (alibi is None or alibi.dtype == np.float32)
            and (sinks is None or sinks.dtype == np.float32)
        ):
            keys, values = as_half_bits(k_cache, v_cache)  # float16: widened in the kernels (half_bits)
            out = np.empty(q.shape, dtype=np.float32)  # (T, H, Dh)
            paged = (q, keys, values, block_tables, ctx_lens, q_lens)
            args = (int(block_size), np.float32(scale), int(window), np.float32(softcap))
            parallel_decode = self._numba_prefill and q.shape[0] >= PARALLEL_DECODE_SEQS
            slopes = self._ops.NO_ALIBI if alibi is None else np.ascontiguousarray(alibi)  # (H,) or (0,)
            logits = self._ops.NO_SINKS if sinks is None else np.ascontiguousarray(sinks)  # (H,) or (0,)
            if q.shape[0] == ctx_lens.shape[0] and not parallel_decode:
                # without ALiBi or sinks the decode kernel takes neither: fewer arrays to type-check per call
                if alibi is None and sinks is None:
                    decoded = self._ops.attention_decode(*paged, *args, out)
                else:
                    decoded = self._ops.attention_decode_biased(*paged, *args, slopes, logits, out)
                if decoded:
                    return out
            if self._numba_prefill:
                self._ops.attention_prefill(*paged, *args, slopes, logits, out)
                return out
        given = (q, k_cache, v_cache, block_tables, ctx_lens, q_lens, block_size)
        return super().attention(*given, scale, window, softcap, alibi, sinks)

    def attention_dense(self, q, k, v, q_lens, kv_lens, scale, causal=False, window=0, rel_bias=None):
        # One parallel numba call for the whole packed batch (blazr.backends.cpu_dense_attention); it declines
        # lengths that do not fit the arrays, and numpy's version then reports them.
        kernels = self._dense_attention
        if (
            kernels is not None
            and q.dtype == k.dtype == v.dtype == np.float32
            and q.ndim == k.ndim == v.ndim == 3
            and q_lens.dtype == kv_lens.dtype == np.int32
            and (rel_bias is None or np.ndim(rel_bias) == 2)
        ):
            # views (of fused qkv rows) are copied: the kernel then vectorises, and compiles for one layout;
            # q (Tq, H, Dk), k (Tk, Hkv, Dk), v (Tk, Hkv, Dv)
            q, k, v = (np.ascontiguousarray(a) for a in (q, k, v))
            out = np.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=np.float32)  # (Tq, H, Dv)
            from blazr.backends import cpu_long_attention as long

            if long.takes(q_lens, kv_lens, causal, window, rel_bias):
                long.attention_long(q, k, v, q_lens, kv_lens, scale, out)
                return out
            lens = (np.ascontiguousarray(q_lens), np.ascontiguousarray(kv_lens))  # (B,) each
            flags = (np.float32(scale), bool(causal), int(window))
            rel = kernels.NO_REL if rel_bias is None else np.ascontiguousarray(rel_bias, dtype=np.float32)
            # sequences of at most short.MAX_KEYS keys: one task per sequence, every head (it declines longer)
            from blazr.backends import cpu_dense_short as short

            has_rel = rel_bias is not None
            if short.attention_short(q, k, v, *lens, *flags, out, rel, has_rel):
                return out
            if kernels.attention_dense(q, k, v, *lens, *flags, kernels.Q_TILE, out, rel, has_rel):
                return out
        return super().attention_dense(q, k, v, q_lens, kv_lens, scale, causal, window, rel_bias)


def _all_f32(*arrays) -> bool:
    """Every array given (None skipped) a numpy float32 array."""
    return all(a is None or (isinstance(a, np.ndarray) and a.dtype == np.float32) for a in arrays)


def _all_i32(*arrays) -> bool:
    """Every array given a numpy int32 array."""
    return all(isinstance(a, np.ndarray) and a.dtype == np.int32 for a in arrays)


def _int8_gemm_available() -> bool:
    from blazr.quant.cpu_int8_gemm import AVAILABLE

    return AVAILABLE
