"""numba's thread count for the Python side of a kernel call, without numba.get_num_threads' cost per call.

Why: numba.get_num_threads() enters numba's process-wide launch lock (a multiprocessing lock, then a thread
lock) on every call, ~3 us on a 2-core EPYC, and a decode step asked it once per packed matmul (121 times a
SmolLM2 token). Once the pool has started, the calling thread's count is one C call; before that, and if
numba's internals ever change, the public function answers."""

from __future__ import annotations

from numba import get_num_threads
from numba.np.ufunc import parallel


def num_threads() -> int:
    """What numba.get_num_threads() returns for the calling thread."""
    count = getattr(parallel, "_get_num_threads", None)  # set by numba when its pool starts
    n = count() if count is not None else 0
    return n if n > 0 else get_num_threads()


def rows_per_task(n: int) -> int:
    """Rows a task of a parallel matvec over n rows takes: about 8 tasks per thread. numba's prange hands each
    thread one equal run of the tasks (static), so this balances tasks of unequal cost (a row stack's parts of
    different formats) but not slow cores; where every task is alike, one task a thread saves each task's fixed
    cost (blazr.quant.cpu_lane_matmul._task_rows)."""
    return max(1, -(-n // (8 * num_threads())))
