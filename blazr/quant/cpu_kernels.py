"""Fast CPU quantized matmul with numba: packed GGML rows are decoded in L1/L2, never stored whole.

Decode (few tokens): each thread takes a range of weight rows and reads each row once per call: for up to
FUSED_MAX_TOKENS tokens the common formats multiply the packed blocks directly (blazr.quant.cpu_dots); else a
row is decoded into an L1 scratch row and dotted with every activation row.
Prefill (many tokens): with int8 activations on a CPU with VNNI or AVX2, the formats of
blazr.quant.cpu_int8_gemm run an int8 GEMM (rows unpacked once to bytes, register tiles of int8 dots).
Otherwise an L2-sized tile of rows is decoded to float32, then multiplied by BLAS sgemm, which is far faster
than any dot-product loop once a decoded row is reused by many tokens (or, in a prompt whose other matmuls
run on numba's pool, by blazr.quant.cpu_f32_gemm's float32 tile).
Every entry point releases the GIL (nogil=True): the server's event loop thread then streams tokens while
the engine thread is inside a kernel, instead of waiting out Python's GIL switch interval on every token.
Importing this module imports numba; the CPU backend falls back to blazr.quant.reference_matmul without it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import TaskByAddress, call_address
from blazr.numba_threads import num_threads, rows_per_task
from blazr.quant import QuantRowStack, QuantWeight, cpu_iq_blocks, cpu_small_blocks  # noqa: F401 (registers)
from blazr.quant.cpu_blocks import DECODERS, F16_TABLE, NEUTRAL_TAG, decode_row, format_tag
from blazr.quant.cpu_dots import DOTS, row_dot
from blazr.quant.cpu_f32_gemm import matmul_f32_gemm
from blazr.quant.cpu_int8_dots import INT8_DOTS, matmul_int8
from blazr.quant.cpu_int8_gemm import FORMATS as GEMM_FORMATS
from blazr.quant.cpu_int8_gemm import matmul_int8_gemm
from blazr.quant.cpu_int8_lanes import FORMATS as LANE_FORMATS
from blazr.quant.cpu_lane_matmul import LaneMatmul, StackedLaneMatmul, matmul_int8_lanes
from blazr.quant.cpu_simd import prefetch

FORMATS: tuple[str, ...] = tuple(DECODERS)
# From this many tokens the decoded tile + sgemm path wins: CPU time per call on a 2-core AVX-512 machine,
# (2048, 2048) Q4_0/Q4_K/Q8_0 weights, crossed over between 8 and 16 tokens (docs/performance.md).
GEMM_MIN_TOKENS = 12
# Up to this many tokens, formats with a direct dot (blazr.quant.cpu_dots) skip the decoded scratch row.
FUSED_MAX_TOKENS = 1
# Weights of INT8_FORMATS (any of cpu_int8_dots.INT8_DOTS) round x to int8 per 32 values and use integer SIMD
# dots: 2.4-3.4x less CPU time than float32 x for one token. It changes results by about 3e-5 NMSE
# (tests/test_quant_int8.py). Where the CPU has the int8 GEMM (cpu_int8_gemm.FORMATS is empty without VNNI or
# AVX2), few tokens take the lane dots and from INT8_GEMM_MIN_TOKENS tokens the GEMM; both round a token
# bit for bit alike, so the switch is a speed choice only. The GEMM unpacks every row once per call and then
# runs a denser tile; the lane dots read the packed rows once per token. Crossovers measured with
# benchmarks/bench_int8_crossover.py (a whole model's matmuls, 2 threads, Intel Xeon with AVX-512 VNNI; see
# docs/performance.md): 4-6 tokens for the 4- to 6-bit formats (SmolLM2's Q4_1, Qwen2.5-0.5B's Q5_0, Q4_K and
# Q6_K), 26-32 for Q8_0, whose unpacking saves nothing (its bytes are the values) yet costs a copy.
INT8_GEMM_MIN_TOKENS = 6
INT8_GEMM_MIN_TOKENS_BY_FORMAT = {"Q8_0": 28}


def int8_gemm_min_tokens(fmt: str) -> int:
    """From this many tokens a weight of format `fmt` takes the int8 GEMM rather than the lane dots."""
    return INT8_GEMM_MIN_TOKENS_BY_FORMAT.get(fmt, INT8_GEMM_MIN_TOKENS)


# Q8_0 among them, as llama.cpp does: its GEMM tile takes the signed weight bytes exactly (cpu_gemm_simd), so a
# Q8_0 tensor (the tied embedding / LM head of many Q4_K_M files) no longer runs float32 x at a third the speed.
INT8_FORMATS: frozenset[str] = frozenset(INT8_DOTS)
# The row kernels ask for the row this far ahead while they work: the hardware prefetcher stops at each 4 KB
# page, and streaming Q8_0 weights ran at 6 G weights/s without it against 10-11 with it (2 threads).
PREFETCH_ROWS = 4
_TILE_ELEMS = 1 << 18  # float32 values per decoded tile (1 MB): stays in L2 between decode and sgemm


@njit(inline="always")
def prefetch_row(blocks, r):
    """Prefetch every cache line of row r of blocks (N, row_bytes); nothing past the last row."""
    if r < blocks.shape[0]:
        row = blocks[r]  # (row_bytes,)
        for i in range(0, row.size, 64):
            prefetch(row, i)


@njit(cache=True, fastmath=True, nogil=True)
def _dot_span(tag, blocks, f16, x, out, start, stop):
    """out[:, start:stop] = x (T, K) @ decode(blocks[start:stop]).T, one decoded row at a time.
    A serial function of its own: fastmath (a vectorised reduction) is not applied inside a prange body."""
    k = x.shape[1]
    scratch = np.empty(k, dtype=np.float32)  # (K,) one decoded row, stays in L1
    for r in range(start, stop):
        prefetch_row(blocks, r + PREFETCH_ROWS)
        decode_row(tag, blocks[r], f16, scratch)
        for t in range(x.shape[0]):
            xt = x[t]  # (K,)
            acc = np.float32(0.0)
            for i in range(k):
                acc += scratch[i] * xt[i]
            out[t, r] = acc


@njit(cache=True, nogil=True)
def _fused_span(tag, blocks, f16, x, xsum, out, start, stop):
    for r in range(start, stop):
        prefetch_row(blocks, r + PREFETCH_ROWS)
        row_dot(tag, blocks[r], f16, x, xsum, out, r)


@njit(parallel=True, cache=True, nogil=True)
def _launch_fused(span, tag, blocks, f16, x, xsum, out, rows_per_task):
    """out (T, N) = x (T, K) @ dequantized(blocks).T with the direct dots; xsum (T, K/32) block sums of x.
    span: _fused_span's address for the format (blazr.numba_address), tag the neutral one."""
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start, stop = task * rows_per_task, min(n, (task + 1) * rows_per_task)
        call_address(span, (tag, blocks, f16, x, xsum, out, start, stop))


# a span's arguments: the tag and arrays the caller gives, then the launcher's start and stop rows
def _given_then_rows(*arrays):
    return (*arrays, types.int64, types.int64)


_FUSED_SPAN = TaskByAddress(_fused_span, _given_then_rows, NEUTRAL_TAG)


def _matmul_fused(x, blocks, tag, f16, xsum, out, rows_per_task):
    span = _FUSED_SPAN.address(tag, blocks, f16, x, xsum, out)
    _launch_fused(span, NEUTRAL_TAG, blocks, f16, x, xsum, out, rows_per_task)


@njit(cache=True, nogil=True)
def _decode_span(tag, blocks, f16, out, start, stop):
    for r in range(start, stop):
        decode_row(tag, blocks[r], f16, out[r])


@njit(parallel=True, cache=True, nogil=True)
def _launch_rows(span, tag, blocks, f16, x, out, rows_per_task):
    """out (T, N) = x (T, K) @ decode(blocks (N, row_bytes)).T; one parallel region per call (span:
    _dot_span's address)."""
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start, stop = task * rows_per_task, min(n, (task + 1) * rows_per_task)
        call_address(span, (tag, blocks, f16, x, out, start, stop))


@njit(parallel=True, cache=True, nogil=True)
def _launch_decode(span, tag, blocks, f16, out, rows_per_task):
    """out (n, K) float32 = every packed row of blocks (n, row_bytes) decoded (span: _decode_span's)."""
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start, stop = task * rows_per_task, min(n, (task + 1) * rows_per_task)
        call_address(span, (tag, blocks, f16, out, start, stop))


_DOT_SPAN = TaskByAddress(_dot_span, _given_then_rows, NEUTRAL_TAG)
_DECODE_SPAN = TaskByAddress(_decode_span, _given_then_rows, NEUTRAL_TAG)


def _matmul_rows(x, blocks, tag, f16, out, rows_per_task):
    span = _DOT_SPAN.address(tag, blocks, f16, x, out)
    _launch_rows(span, NEUTRAL_TAG, blocks, f16, x, out, rows_per_task)


def _decode_rows(blocks, tag, f16, out, rows_per_task):
    span = _DECODE_SPAN.address(tag, blocks, f16, out)
    _launch_decode(span, NEUTRAL_TAG, blocks, f16, out, rows_per_task)


_rows_per_task = rows_per_task  # (the benchmarks' name for it)


def dequantize(w: QuantWeight) -> np.ndarray:
    """All rows of `w` decoded to float32 (N, K)."""
    out = np.empty(w.shape, dtype=np.float32)  # (N, K)
    _decode_rows(w.blocks, format_tag(w.format), F16_TABLE, out, _rows_per_task(len(out)))
    return out


def matmul(x: np.ndarray, w: QuantWeight | QuantRowStack, int8: bool = True, blas: bool = True) -> np.ndarray:
    """x (T, K) float32 @ dequantized(w).T -> (T, N) float32, reading w packed; int8=False keeps the
    activations float32 where the int8 path would round them; blas=False keeps the call off BLAS's thread
    pool (see `path`)."""
    if isinstance(w, QuantRowStack):
        return np.concatenate([matmul(x, part, int8, blas) for part in w.parts], axis=1)
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, k = w.shape
    out = np.empty((x.shape[0], n), dtype=np.float32)  # (T, N)
    tag = format_tag(w.format)
    kernel = path(x.shape[0], w.format, int8, blas)
    if kernel == "int8":
        matmul_int8(x, w.blocks, tag, out, _rows_per_task(n))
    elif kernel == "int8-lanes":
        matmul_int8_lanes(x, w.blocks, tag, out, _rows_per_task(n))
    elif kernel == "int8-gemm":
        matmul_int8_gemm(x, w.blocks, tag, out, num_threads())
    elif kernel == "fused":
        xsum = x.reshape(x.shape[0], k // 32, 32).sum(axis=2)  # (T, K/32)
        _matmul_fused(x, w.blocks, tag, F16_TABLE, xsum, out, _rows_per_task(n))
    elif kernel == "f32-gemm":
        matmul_f32_gemm(x, w.blocks, tag, out, num_threads())
    elif kernel == "rows":
        _matmul_rows(x, w.blocks, tag, F16_TABLE, out, _rows_per_task(n))
    else:
        _matmul_sgemm(x, w, tag, out)
    return out


def _takes_lanes(w: QuantWeight) -> bool:
    fmt = w.format
    return w.perm is None and fmt in INT8_FORMATS and fmt in GEMM_FORMATS and fmt in LANE_FORMATS


def lane_matmul(w: QuantWeight) -> LaneMatmul | None:
    """w's matmul for int8 activations at few tokens with its kernel decided once (cpu_lane_matmul.LaneMatmul),
    where the lane dots take w's format; else None."""
    if not _takes_lanes(w):
        return None
    return LaneMatmul(w.blocks, format_tag(w.format), w.shape[0], int8_gemm_min_tokens(w.format))


def stacked_lane_matmul(w: QuantRowStack) -> StackedLaneMatmul | None:
    """lane_matmul for packed parts of several formats stacked by rows, in one launch
    (cpu_lane_matmul.StackedLaneMatmul), where the lane dots take every part; else None."""
    if not all(_takes_lanes(p) for p in w.parts):
        return None
    tokens = min(int8_gemm_min_tokens(p.format) for p in w.parts)
    return StackedLaneMatmul([(p.blocks, format_tag(p.format)) for p in w.parts], tokens)


def path(tokens: int, fmt: str, int8: bool, blas: bool = True) -> str:
    """The kernel matmul runs for `tokens` rows of x and weights of format `fmt`: "int8" (row dots with int8
    x), "int8-lanes" (cpu_int8_lanes), "int8-gemm" (cpu_int8_gemm), "fused" (direct float dots), "rows"
    (decoded row dots), all on numba's thread pool, or "sgemm" (decoded tiles times BLAS sgemm, on BLAS's pool) unless blas=False, which takes
    "f32-gemm" (cpu_f32_gemm, float32 tiles on numba's pool) instead: in a model whose prompts otherwise run
    the int8 GEMM (a float-only tensor, IQ4_NL say, among Q5_0 ones; Q8_0 was one until it took int8 x), one
    sgemm woke OpenBLAS's spinning threads against numba's (0.5B Q4_K_M shape: prefill 1.17 s, 0.62 s with
    OpenBLAS at one thread)."""
    if int8 and fmt in INT8_FORMATS:
        # int8 x for every token count, so that a token rounds the same alone and in any batch: without an
        # int8 GEMM (no VNNI or AVX2) prompts take the row dots, slower than sgemm, which is why the
        # backend asks for int8 there only on --dtype q8 (blazr.backends.cpu)
        if fmt in GEMM_FORMATS and fmt in LANE_FORMATS:
            # few tokens take the lane dots, which round exactly as the GEMM: batch-invariant output
            return "int8-gemm" if tokens >= int8_gemm_min_tokens(fmt) else "int8-lanes"
        return "int8"
    if tokens <= FUSED_MAX_TOKENS and fmt in DOTS:
        return "fused"
    if tokens < GEMM_MIN_TOKENS:
        return "rows"
    return "sgemm" if blas else "f32-gemm"


def _matmul_sgemm(x: np.ndarray, w: QuantWeight, tag: np.ndarray, out: np.ndarray) -> None:
    """out (T, N) = x (T, K) @ decode(w).T, one L2-sized tile of decoded rows per sgemm call."""
    n, k = w.shape
    tile_rows = max(1, min(n, _TILE_ELEMS // k))
    tile = np.empty((tile_rows, k), dtype=np.float32)  # (tile_rows, K) reused for every tile
    for start in range(0, n, tile_rows):
        stop = min(n, start + tile_rows)
        # Serial decode: a numba parallel region between two multithreaded sgemm calls makes the two thread
        # pools spin against each other on every tile (measured 100x slower); the sgemm is the costly part.
        _decode_span(tag, w.blocks[start:stop], F16_TABLE, tile, 0, stop - start)
        np.matmul(x, tile[: stop - start].T, out=out[:, start:stop])


def embed(w: QuantWeight, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` (T,) of the dequantized table -> (T, K) float32."""
    rows = np.ascontiguousarray(w.blocks[np.asarray(ids)])  # (T, row_bytes)
    rows.flags.writeable = False  # the type `dequantize` passes (QuantWeight's read-only blocks): one compile
    out = np.empty((len(rows), w.shape[1]), dtype=np.float32)  # (T, K)
    _decode_rows(rows, format_tag(w.format), F16_TABLE, out, _rows_per_task(len(out)))
    return out
