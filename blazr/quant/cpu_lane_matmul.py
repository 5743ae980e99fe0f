"""The parallel decode matvec on the lane dots (blazr.quant.cpu_int8_lanes): x rounded to int8 as the GEMM
rounds it, the rows split into tasks on numba's pool, each task's rows ROWS at a time through the format's
kernel. `matmul_int8_lanes` for any call; `LaneMatmul` for a weight's decode matmul with all but x decided once.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)
from blazr.numba_address import call_address
from blazr.numba_threads import num_threads, rows_per_task
from blazr.quant.cpu_blocks import NEUTRAL_TAG, dispatch_by_format
from blazr.quant.cpu_int8_dots import int8_task
from blazr.quant.cpu_int8_gemm import quantize_padded
from blazr.quant.cpu_int8_lanes import AVAILABLE, LANE_DOTS, LANES, ROWS


def _span_for(fmt: str, kernel):
    """The rows start..stop of one task, ROWS at a time through `kernel` (the format's lane dots) called
    directly: through a format dispatcher (cpu_blocks.dispatch_by_format) each call of 8 rows took another
    ~120 ns (its 8 array arguments passed on again, or counted again where it was inlined): 10% of Gemma 3's
    attention output (Q4_K, 1024 x 640; one thread, Zen 1 class EPYC). So the dispatcher picks this loop, once
    a task."""

    def span(blocks, xq, dx, xsum, out, start, stop):
        acc = np.zeros((ROWS, LANES), dtype=np.float32)  # (ROWS, LANES) each row's accumulator
        mins = np.zeros((ROWS, xsum.shape[1]), dtype=np.float32)  # (ROWS, G) offsets; padding groups stay 0
        for r in range(start, stop, ROWS):
            kernel(blocks[r : min(stop, r + ROWS)], xq, dx, xsum, acc, mins, out, r)

    # a name of its own: numba's caches and inliner know a function by its name
    span.__name__ = span.__qualname__ = f"_lane_span_{fmt.lower()}"
    return njit(nogil=True)(span)


_lane_span = dispatch_by_format(
    {fmt: _span_for(fmt, kernel) for fmt, kernel in LANE_DOTS.items()}, "lane_span"
)


@njit(cache=True, nogil=True)
def _span(tag, blocks, xq, dx, xsum, out, start, stop):
    _lane_span(tag, blocks, xq, dx, xsum, out, start, stop)


@njit(parallel=True, cache=True, nogil=True)
def _launch(span, tag, x, blocks, out, rows_per_task):
    """The parallel matvec (span: _span's address for the format, tag the neutral one)."""
    t, k = x.shape
    xq, dx, xsum = quantize_padded(x, t, (k + 63) // 64 * 64)  # the GEMM's own rounding of x
    n = blocks.shape[0]
    for task in prange((n + rows_per_task - 1) // rows_per_task):
        start, stop = task * rows_per_task, min(n, (task + 1) * rows_per_task)
        call_address(span, (tag, blocks, xq, dx, xsum, out, start, stop))


# _span(tag, blocks, xq (Tp, Kp) int8, dx (Tp, Kp/32) f32, xsum (Tp, G) f32, out, start, stop)
_SPAN_TASK = int8_task(_span, np.float32, 2)


class LaneMatmul:
    """One packed weight's matmul on the lane dots with all but x decided once: a decode step's packed matmul
    spent ~12 us in Python choosing its kernel, tag and task address, per weight and step (SmolLM2: 121 a
    token; 7% of its decode on a Zen 1 class EPYC). `self(x)` for x (T, K) C-contiguous float32, T < max_tokens
    (where the int8 GEMM takes over); the same output as matmul_int8_lanes."""

    __slots__ = ("span", "blocks", "n", "max_tokens")

    def __init__(self, blocks: np.ndarray, tag: np.ndarray, n: int, max_tokens: int):
        if not AVAILABLE:
            raise RuntimeError("the int8 lane dots need an x86 CPU with VNNI or AVX2, as the int8 GEMM")
        self.span = _SPAN_TASK.address(tag, blocks, np.empty((1, n), dtype=np.float32))
        self.blocks, self.n, self.max_tokens = blocks, n, max_tokens

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], self.n), dtype=np.float32)  # (T, N)
        _launch(self.span, NEUTRAL_TAG, x, self.blocks, out, _task_rows(self.n))
        return out


def _task_rows(n: int) -> int:
    """Rows a LaneMatmul task takes: n / threads in whole ROWS-row groups, one task a thread. numba's prange
    gives each thread one equal run of the tasks (static), so more tasks balance nothing and add their fixed
    cost (scratch, call): SmolLM2's 576 x 576 Q4_1 35.5-37.1 us at one task a thread, 37.4-37.7 at eight (Zen 1
    class EPYC). A stack's parts keep rows_per_task: their tasks differ in size."""
    per_thread = -(-n // num_threads())
    return -(-per_thread // ROWS) * ROWS


def matmul_int8_lanes(
    x: np.ndarray, blocks: np.ndarray, tag: np.ndarray, out: np.ndarray, rows_per_task: int
):
    """out (T, N) = int8-rounded x (T, K) float32 @ dequantized(blocks (N, row_bytes)).T, each cell equal to
    the int8 GEMM's (cpu_int8_gemm.matmul_int8_gemm) bit for bit."""
    if not AVAILABLE:
        raise RuntimeError("the int8 lane dots need an x86 CPU with VNNI or AVX2, as the int8 GEMM")
    _launch(_SPAN_TASK.address(tag, blocks, out), NEUTRAL_TAG, x, blocks, out, rows_per_task)


@njit(parallel=True, cache=True, nogil=True)
def _launch_stack(spans, tag, x, parts, out, ends, rows_per_task):
    """_launch over a stack of packed parts (a tuple of (N_p, row_bytes_p) uint8 arrays, out's columns
    ends[p - 1]..ends[p] theirs; spans[p] part p's span address): x is quantized once and every part's row
    tasks share one parallel loop."""
    t, k = x.shape
    xq, dx, xsum = quantize_padded(x, t, (k + 63) // 64 * 64)  # the GEMM's own rounding of x
    firsts = np.zeros(len(parts) + 1, dtype=np.int64)  # (P + 1,) each part's first task
    for p in range(len(parts)):
        firsts[p + 1] = firsts[p] + (parts[p].shape[0] + rows_per_task - 1) // rows_per_task
    for task in prange(firsts[-1]):
        p = 0
        while task >= firsts[p + 1]:
            p += 1
        blocks = parts[p]
        start = (task - firsts[p]) * rows_per_task
        stop = min(blocks.shape[0], start + rows_per_task)
        call_address(
            spans[p], (tag, blocks, xq, dx, xsum, out[:, ends[p] - blocks.shape[0] : ends[p]], start, stop)
        )


class StackedLaneMatmul:
    """LaneMatmul for packed weights of several formats stacked by rows (quant.QuantRowStack: a Q4_K_M file's
    fused q/k/v with a Q8_0 or Q6_K v): one quantization of x and one parallel loop for all the parts, where
    a matmul per part and a concatenation took 1.35x the time of a one-format stack of the same shape
    (Qwen2.5-Coder's Q5_0 + Q8_0 q/k/v, 184 against 134 us a step; Zen 1 class EPYC)."""

    __slots__ = ("spans", "parts", "ends", "n", "max_tokens")

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]], max_tokens: int):
        if not AVAILABLE:
            raise RuntimeError("the int8 lane dots need an x86 CPU with VNNI or AVX2, as the int8 GEMM")
        # one numba type for every part (a tuple indexed at run time): read-only views, as a file's parts are
        self.parts = tuple(_read_only(blocks) for blocks, _ in parts)
        self.n = sum(blocks.shape[0] for blocks in self.parts)
        self.ends = np.cumsum([blocks.shape[0] for blocks in self.parts]).astype(np.int64)  # (P,)
        columns = np.empty((2, self.n + 1), dtype=np.float32)[:, :1]  # a part's columns of out: strided
        self.spans = np.array(
            [
                _SPAN_TASK.address(tag, blocks, columns)
                for blocks, (_, tag) in zip(self.parts, parts, strict=True)
            ],
            dtype=np.int64,
        )  # (P,)
        self.max_tokens = max_tokens

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], self.n), dtype=np.float32)  # (T, N)
        _launch_stack(self.spans, NEUTRAL_TAG, x, self.parts, out, self.ends, rows_per_task(self.n))
        return out


def _read_only(blocks: np.ndarray) -> np.ndarray:
    view = blocks.view()
    view.flags.writeable = False
    return view
