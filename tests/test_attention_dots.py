"""The paged attention's query-key dot products (blazr.backends.cpu_attention_dots): against the float64 product,
float16 keys widened exactly, and one order of summation wherever a key is dotted (alone or in a group of four,
in any kernel), which is what makes the serial and parallel attention kernels agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

from blazr.backends.cpu_attention_dots import dot_row, dot_rows4  # noqa: E402

pytestmark = pytest.mark.isa


@njit
def four(q, k):
    return dot_rows4(q, k[0], k[1], k[2], k[3])


@njit
def one(q, k):
    return dot_row(q, k)


@njit
def four_in_a_loop(q, k, out):
    """The same dots inlined into another function, in a loop LLVM may transform."""
    for j in range(0, k.shape[0] - 3, 4):
        out[j], out[j + 1], out[j + 2], out[j + 3] = dot_rows4(q, k[j], k[j + 1], k[j + 2], k[j + 3])


# head sizes: whole 16-value steps, a tail of 8 (80), odd tails, shorter than one step
@pytest.mark.parametrize("dh", [1, 7, 16, 64, 72, 80, 96, 128, 256, 259])
def test_dots_match_float64_and_agree_wherever_they_run(dh, rng):
    q = rng.standard_normal(dh).astype(np.float32)
    k = (rng.standard_normal((8, dh)) * rng.uniform(0.01, 100.0, (8, 1))).astype(np.float32)  # (8, Dh)
    want = k.astype(np.float64) @ q.astype(np.float64)  # (8,)
    got = np.array(four(q, k[:4]) + four(q, k[4:]), dtype=np.float32)  # (8,)
    # float32 rounding of this order: a rounding per 16-value step of a lane, 4 in the lanes' tree, one per tail
    # product, each at most 2^-24 of the sum of |products|
    roundings = dh // 16 + 4 + dh % 16 + 1
    bound = roundings * 2.0**-24 * (np.abs(k.astype(np.float64)) @ np.abs(q.astype(np.float64)))
    assert np.all(np.abs(got - want) <= bound)
    alone = np.array([one(q, row) for row in k], dtype=np.float32)
    looped = np.empty(8, dtype=np.float32)
    four_in_a_loop(q, k, looped)
    np.testing.assert_array_equal(alone, got)
    np.testing.assert_array_equal(looped, got)


@pytest.mark.parametrize("dh", [16, 80, 3])
def test_float16_keys_are_widened_exactly(dh, rng):
    """uint16 bits of float16 keys give the dots of the same keys as float32, subnormals and zeros included."""
    q = rng.standard_normal(dh).astype(np.float32)
    k = rng.standard_normal((4, dh)).astype(np.float16)
    k[0, :2] = np.float16(3e-7), np.float16(-0.0)  # a float16 subnormal, a negative zero
    np.testing.assert_array_equal(
        np.array(four(q, k.view(np.uint16))), np.array(four(q, k.astype(np.float32)))
    )
