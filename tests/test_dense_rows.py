"""Dense float32 matmuls of a few rows against a large weight (Whisper's 51864 x D head for its beams): with
numba_matmul_rows set, up to STREAMED_ROWS rows run numba's row dots on its pool (cpu_ops.dense_matmul) instead
of OpenBLAS, which read the weight once a row; they equal a float64 reference, and a row gets the same bits
alone, in any batch, and on one thread (dense_matmul_serial, the path of the small products)."""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends import cpu_ops

pytestmark = pytest.mark.isa


@pytest.mark.parametrize(("n", "k", "t"), [(1, 8, 1), (7, 16, 3), (33, 24, 9), (40, 12, 12)])
def test_equals_float64_and_is_batch_invariant(rng, n, k, t):
    w = rng.standard_normal((n, k)).astype(np.float32)  # (N, K)
    x = rng.standard_normal((t, k)).astype(np.float32)  # (T, K)
    want = x.astype(np.float64) @ w.T.astype(np.float64)  # (T, N)
    pooled, serial = np.empty((t, n), np.float32), np.empty((t, n), np.float32)
    cpu_ops.dense_matmul(x, w, pooled, 3)
    cpu_ops.dense_matmul_serial(x, w, serial)
    np.testing.assert_allclose(pooled, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    np.testing.assert_array_equal(pooled, serial)
    for row in range(t):  # each row alone: the same bits as in the batch
        alone = np.empty((1, n), np.float32)
        cpu_ops.dense_matmul(x[row : row + 1], w, alone, 3)
        np.testing.assert_array_equal(alone[0], pooled[row])


@pytest.mark.parametrize("rows", [1, 5])
def test_a_large_weight_for_a_few_rows_takes_numbas_pool(rng, monkeypatch, rows):
    from blazr.backends import get_backend
    from blazr.backends.cpu import STREAMED_ROWS

    be = get_backend("cpu")
    monkeypatch.setattr(be, "numba_matmul_rows", 16)  # as Transcriber.load sets it
    w = rng.standard_normal((65536, 64)).astype(np.float32)  # (N, K): past SERIAL_MACS for one row
    calls, real = [], cpu_ops.dense_matmul
    monkeypatch.setattr(cpu_ops, "dense_matmul", lambda *a: calls.append(a) or real(*a))
    for count in (rows, STREAMED_ROWS + 1):
        x = rng.standard_normal((count, 64)).astype(np.float32)
        out = be.matmul(x, w)
        np.testing.assert_allclose(out, x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
    assert len(calls) == 1  # the first; STREAMED_ROWS + 1 rows went to OpenBLAS
