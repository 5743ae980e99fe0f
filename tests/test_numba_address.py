"""blazr.numba_address: a parallel launcher compiled once, calling a per-format task by its address."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit, prange, types

from blazr.numba_address import TaskByAddress, c_array, call_address
from blazr.quant.cpu_blocks import NEUTRAL_TAG, dispatch_by_format, format_tag

# each "format" scales by its own constant, picked at compile time as the packed formats' code is
_scale = dispatch_by_format({"Q4_0": njit(lambda: 2.0), "Q8_0": njit(lambda: 3.0)}, "scale")


@njit(nogil=True)
def _task(tag, x, scratch, out, start, stop):
    """out[start:stop] = x * the format's scale (scratch: the launcher's own array, written and read)."""
    for i in range(start, stop):
        if x[i] < 0:
            raise ValueError("negative input")
        scratch[i] = x[i] * _scale(tag)
        out[i] = scratch[i]


@njit(parallel=True, nogil=True)
def _launch(task, tag, x, out, per_task):
    scratch = np.empty(x.shape[0], dtype=np.float64)  # (N,)
    n = x.shape[0]
    for t in prange((n + per_task - 1) // per_task):
        call_address(task, (tag, x, scratch, out, t * per_task, min(n, (t + 1) * per_task)))


_TASK = TaskByAddress(
    _task, lambda tag, x, out: (tag, x, c_array(np.float64, 1), out, types.int64, types.int64), NEUTRAL_TAG
)


def _run(fmt: str, x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    tag = format_tag(fmt)
    _launch(_TASK.address(tag, x, out), NEUTRAL_TAG, x, out, 3)
    return out


def test_each_format_runs_its_own_code_through_one_launcher():
    x = np.arange(10, dtype=np.float64)
    np.testing.assert_array_equal(_run("Q4_0", x), 2 * x)
    np.testing.assert_array_equal(_run("Q8_0", x), 3 * x)
    assert len(_launch.signatures) == 1  # one launcher for both formats
    assert len(_task.signatures) == 2


def test_the_task_is_compiled_again_for_other_argument_types():
    x = np.arange(10, dtype=np.float64)
    np.testing.assert_array_equal(_run("Q4_0", x[::2]), 2 * x[::2])  # a strided view: layout "A"
    assert types.Array(types.float64, 1, "A") in {sig[1] for sig in _task.signatures}


def test_an_exception_in_the_task_reaches_the_caller():
    """As through a direct call inside numba's parallel loop: a SystemError whose cause is the task's error."""
    with pytest.raises(SystemError) as raised:
        _run("Q4_0", np.array([1.0, -1.0, 2.0]))
    assert isinstance(raised.value.__cause__, ValueError)
    assert str(raised.value.__cause__) == "negative input"


def test_a_neutral_tag_of_another_data_model_is_refused():
    wrong = TaskByAddress(
        _task,
        lambda tag, x, out: (tag, x, c_array(np.float64, 1), out, types.int64, types.int64),
        np.empty((0, 0), dtype=NEUTRAL_TAG.dtype),  # a 2-D tag: numba passes it as more values
    )
    x = np.arange(4, dtype=np.float64)
    with pytest.raises(TypeError, match="cannot be called by address as launched"):
        wrong.address(format_tag("Q4_0"), x, np.zeros_like(x))
