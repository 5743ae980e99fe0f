"""The state-space-model ops (causal_conv1d, ssm_scan) on every backend against the float64 references in
tests/reference.py: B sequences laid back to back, each reading and writing its own slot of `states` in
place. Every test compares the outputs *and* the states after the call (the slots used get the reference's
new states; the others must keep their old values)."""

from __future__ import annotations

import numpy as np
import pytest

from tests import reference
from tests.conftest import AVAILABLE_BACKENDS
from tests.test_ops import normal
from tests.tolerances import assert_close

pytestmark = pytest.mark.isa  # rerun by CI with the kernels compiled for other ISA levels


def batch(rng, lens, fresh, n_slots):
    """seq_slots (B,) shuffled among n_slots, q_lens (B,), fresh (B,), int32 each."""
    slots = rng.permutation(n_slots)[: len(lens)].astype(np.int32)
    return slots, np.array(lens, dtype=np.int32), np.array(fresh, dtype=np.int32)


def run(backend, op, args, states, ints, dtype="f32", **kwargs):
    """Upload (activations and weights in dtype, states in f32), run the op, check it left every input but
    states alone; returns (out, states after) downloaded."""
    dev = [None if a is None else backend.upload(a, dtype) for a in args]
    dev_states = backend.upload(states, "f32")
    dev_ints = [backend.upload(a) for a in ints]
    before = [None if d is None else backend.download(d) for d in dev + dev_ints]
    out = getattr(backend, op)(*dev, dev_states, *dev_ints, **kwargs)
    for i, (d, b) in enumerate(zip(dev + dev_ints, before, strict=True)):
        if d is not None:
            assert np.array_equal(backend.download(d), b), f"{op} changed its input #{i}"
    got_states = backend.download(dev_states)
    assert got_states.dtype == np.float32, f"{op}: states became {got_states.dtype}"
    return backend.download(out), got_states


def check(backend, op, args, states, ints, dtype="f32", **kwargs):
    """The op against the reference: outputs, states of the slots used, and the other slots unchanged."""
    got, got_states = run(backend, op, args, states, ints, dtype, **kwargs)
    assert got.dtype == (np.float16 if dtype == "f16" else np.float32)
    want, want_states = getattr(reference, op)(*args, states, *ints, **kwargs)
    assert_close(op, dtype, got, want)
    used = ints[0]
    assert_close(op, dtype, got_states[used], want_states[used])
    unused = np.setdiff1d(np.arange(states.shape[0]), used)
    assert np.array_equal(got_states[unused], states[unused]), f"{op} wrote a slot no sequence names"
    return got, got_states


# ---- causal_conv1d -----------------------------------------------------------------------------------
CONV_CASES = {
    # name: (C, K, q_lens, fresh, S)
    "one_row_continuing": (7, 4, [1], [0], 1),
    "seven_rows_fresh": (33, 4, [7], [1], 3),
    "thirty_three_continuing": (7, 4, [33], [0], 2),
    "fewer_rows_than_the_state": (5, 4, [2], [0], 2),  # the new state mixes old and new rows
    "batch_mixed": (33, 4, [5, 1, 0, 9], [1, 0, 1, 0], 7),  # the empty fresh sequence zeroes its slot
    "batch_k2": (7, 2, [3, 0, 1, 4], [0, 0, 1, 1], 5),  # the empty continuing one keeps its slot
    "decode_batch_mamba2_width": (2304, 4, [1, 1, 1], [0, 1, 0], 4),
    "wide": (4097, 4, [3], [0], 1),
}


def conv_inputs(rng, c, k, lens, fresh, n_slots, bias=True):
    x, w = normal(rng, sum(lens), c), normal(rng, c, k, scale=k**-0.5)
    b = normal(rng, c) if bias else None
    states = normal(rng, n_slots, k - 1, c)  # every slot holds noise: a fresh one must not read it
    return (x, w, b), states, batch(rng, lens, fresh, n_slots)


@pytest.mark.parametrize("act", ["silu", None])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_causal_conv1d(backend, rng, case, bias, act):
    c, k, lens, fresh, n_slots = CONV_CASES[case]
    args, states, ints = conv_inputs(rng, c, k, lens, fresh, n_slots, bias)
    check(backend, "causal_conv1d", args, states, ints, act=act)


def test_causal_conv1d_other_activation_and_default(backend, rng):
    args, states, ints = conv_inputs(rng, 9, 3, [4, 2], [1, 0], 3)
    check(backend, "causal_conv1d", args, states, ints, act="gelu")
    got, _ = run(backend, "causal_conv1d", args, states, ints)  # act defaults to silu
    assert_close("causal_conv1d", "f32", got, reference.causal_conv1d(*args, states, *ints, act="silu")[0])


# ---- ssm_scan ----------------------------------------------------------------------------------------
SCAN_CASES = {
    # name: (H, P, G, N, q_lens, fresh, S, A per state)
    "one_row": (1, 1, 1, 1, [1], [0], 1, False),
    "seven_rows_groups2": (4, 3, 2, 5, [7], [0], 2, False),
    "thirty_three_fresh_groups3": (6, 4, 3, 8, [33], [1], 3, False),
    "batch_mixed": (4, 8, 1, 16, [5, 1, 0, 9], [1, 0, 1, 0], 6, False),
    "batch_groups2": (6, 5, 2, 7, [3, 0, 1, 4], [0, 0, 1, 1], 5, False),
    "mamba1_per_state_a": (33, 1, 1, 16, [7, 1, 3], [1, 0, 0], 4, True),
    "mamba1_one_row": (7, 1, 1, 4, [1], [0], 2, True),
    "decode_batch_mamba2_shape": (32, 64, 1, 128, [1, 1, 1], [0, 1, 0], 4, False),
}


def scan_inputs(rng, h, p, g, n, lens, fresh, n_slots, per_state):
    t = sum(lens)
    dt = np.log1p(np.exp(normal(rng, t, h) - 1.0)).astype(np.float32)  # softplus'ed, as the contract says
    a = -np.exp(normal(rng, h, n) if per_state else normal(rng, h))  # (H, N) or (H,), negative
    args = normal(rng, t, h, p), dt, a, normal(rng, t, g, n), normal(rng, t, g, n), normal(rng, h)
    states = normal(rng, n_slots, h, p, n)  # every slot holds noise: a fresh one must not read it
    return args, states, batch(rng, lens, fresh, n_slots)


@pytest.mark.parametrize("case", list(SCAN_CASES))
def test_ssm_scan(backend, rng, case):
    args, states, ints = scan_inputs(rng, *SCAN_CASES[case])
    check(backend, "ssm_scan", args, states, ints)


# ---- chunks, batches, bad slots ----------------------------------------------------------------------
def conv_rows(args, rows):
    """causal_conv1d's (x, w, b) for the given rows of x."""
    x, w, b = args
    return x[rows], w, b


def scan_rows(args, rows):
    """ssm_scan's (x, dt, A, B, C, D) for the given rows."""
    x, dt, a, b, c, d = args
    return x[rows], dt[rows], a, b[rows], c[rows], d


def int32s(slots, lens, fresh):
    return tuple(np.array(v, dtype=np.int32) for v in (slots, lens, fresh))


def both_ops(rng, lens, fresh, n_slots, heads=6, p=4, n=8):
    """(op, args, states, ints, rows) for causal_conv1d and ssm_scan over one batch."""
    conv_args, conv_states, conv_ints = conv_inputs(rng, 33, 4, lens, fresh, n_slots)
    scan_args, scan_states, scan_ints = scan_inputs(rng, heads, p, 2, n, lens, fresh, n_slots, False)
    return (
        ("causal_conv1d", conv_args, conv_states, conv_ints, conv_rows),
        ("ssm_scan", scan_args, scan_states, scan_ints, scan_rows),
    )


def test_chunked_equals_one_shot(backend, rng):
    """A sequence's rows in two calls (the second continuing, fresh 0) give what one call gives."""
    for op, args, states, (slots, _, _), rows in both_ops(rng, [20], [1], 2):
        one, one_states = run(backend, op, args, states, int32s(slots, [20], [1]))
        head, head_states = run(backend, op, rows(args, slice(0, 8)), states, int32s(slots, [8], [1]))
        tail, two_states = run(backend, op, rows(args, slice(8, 20)), head_states, int32s(slots, [12], [0]))
        assert_close(op, "f32", np.concatenate([head, tail]), one)
        assert_close(op, "f32", two_states, one_states)
        want, want_states = getattr(reference, op)(*args, states, *int32s(slots, [20], [1]))
        assert_close(op, "f32", one, want)
        assert_close(op, "f32", one_states, want_states)


def test_a_decode_row_is_the_same_alone_and_in_a_batch(backend, rng):
    """One row per sequence: each sequence's output and state are bit for bit those it gets alone."""
    lens, fresh = [1, 1, 1, 1], [0, 1, 0, 0]
    for op, args, states, (slots, _, new), rows in both_ops(rng, lens, fresh, 6, heads=32, p=16, n=32):
        out, batch_states = run(backend, op, args, states, int32s(slots, lens, fresh))
        for i, slot in enumerate(slots.tolist()):
            alone, alone_states = run(
                backend, op, rows(args, slice(i, i + 1)), states, int32s([slot], [1], [new[i]])
            )
            assert np.array_equal(alone, out[i : i + 1]), f"{op}: sequence {i} differs in the batch"
            assert np.array_equal(alone_states[slot], batch_states[slot]), f"{op}: state of sequence {i}"


def test_views_in_and_states_in_place(backend, rng):
    """x as columns of a wider array (Mamba's in_proj rows), read in place or copied; on the host backends
    also states as a strided view, whose slots must be written through the view."""
    (x, w, b), states, seq_ints = conv_inputs(rng, 33, 4, [5, 0, 3], [1, 1, 0], 4)
    wide = normal(rng, x.shape[0], 50)
    wide[:, 10:43] = x
    dev_states = backend.upload(states)
    out = backend.causal_conv1d(
        backend.upload(wide)[:, 10:43], backend.upload(w), backend.upload(b), dev_states,
        *(backend.upload(a) for a in seq_ints),
    )  # fmt: skip
    want, want_states = reference.causal_conv1d(x, w, b, states, *seq_ints)
    assert_close("causal_conv1d", "f32", backend.download(out), want)
    assert_close("causal_conv1d", "f32", backend.download(dev_states), want_states)
    if backend.name != "cpu":
        return
    args, states, seq_ints = scan_inputs(rng, 4, 3, 2, 5, [4, 2], [0, 1], 3, False)
    host = np.stack([states, normal(rng, *states.shape)], axis=2)  # (S, H, 2, P, N): no slot is contiguous
    y = backend.ssm_scan(*args, host[:, :, 0], *seq_ints)
    want, want_states = reference.ssm_scan(*args, states, *seq_ints)
    assert_close("ssm_scan", "f32", y, want)
    assert_close("ssm_scan", "f32", host[:, :, 0], want_states)


@pytest.mark.parametrize("bad_slot", [-1, 3])
def test_a_slot_outside_the_states_raises(backend, rng, bad_slot):
    conv_args, conv_states, _ = conv_inputs(rng, 7, 4, [2, 1], [0, 0], 3)
    scan_args, scan_states, _ = scan_inputs(rng, 2, 2, 1, 3, [2, 1], [0, 0], 3, False)
    for op, args, states in (("causal_conv1d", conv_args, conv_states), ("ssm_scan", scan_args, scan_states)):
        with pytest.raises(IndexError):
            run(backend, op, args, states, int32s([0, bad_slot], [2, 1], [0, 0]))


def test_lengths_that_do_not_add_up_raise(backend, rng):
    for op, args, states, _, _ in both_ops(rng, [3], [0], 2):
        with pytest.raises(ValueError):
            run(backend, op, args, states, int32s([0, 1], [2, 2], [0, 0]))


def test_shapes_that_disagree_raise(backend, rng):
    """The kernels index by these shapes without bounds checks: a mismatch must fail before them."""
    (x, w, b), states, seq_ints = conv_inputs(rng, 7, 4, [3], [0], 2)
    with pytest.raises(ValueError):
        run(backend, "causal_conv1d", (x, w, b), states[:, :2], seq_ints)  # K-1 = 2 state rows for K = 4
    args, states, seq_ints = scan_inputs(
        rng, 6, 2, 4, 3, [3], [0], 2, False
    )  # 4 groups do not divide 6 heads
    with pytest.raises(ValueError):
        run(backend, "ssm_scan", args, states, seq_ints)
    args, states, seq_ints = scan_inputs(rng, 4, 2, 2, 3, [3], [0], 2, False)
    with pytest.raises(ValueError):
        run(backend, "ssm_scan", args, np.ascontiguousarray(states[..., :2]), seq_ints)  # N = 2, B's N = 3


# ---- the numba kernels on numba's pool, and wgpu's f16 -------------------------------------------------
@pytest.fixture
def pool_backend(monkeypatch):
    """The cpu backend once its matmuls run on numba's pool, with every scan taking the parallel kernel."""
    pytest.importorskip("numba")
    from blazr.backends import cpu_ssm
    from blazr.backends.cpu import Backend

    monkeypatch.setattr(cpu_ssm, "PARALLEL_SCAN_WORK", 0)
    backend = Backend()
    backend._numba_pool = True
    return backend


@pytest.mark.parametrize("case", list(SCAN_CASES))
def test_ssm_scan_on_numbas_pool_is_the_serial_kernel(pool_backend, rng, case):
    from blazr.backends.cpu import Backend

    args, states, ints = scan_inputs(rng, *SCAN_CASES[case])
    got, got_states = check(pool_backend, "ssm_scan", args, states, ints)
    serial, serial_states = run(Backend(), "ssm_scan", args, states, ints)
    assert np.array_equal(got, serial) and np.array_equal(got_states, serial_states)


@pytest.mark.skipif("wgpu" not in AVAILABLE_BACKENDS, reason="no WebGPU adapter here")
def test_f16_activations_with_f32_states_on_wgpu(rng):
    from blazr.backends import get_backend

    be = get_backend("wgpu")
    if "f16" not in be.act_dtypes:
        pytest.skip("adapter without shader-f16")

    def f16(args):
        return tuple(None if a is None else a.astype(np.float16).astype(np.float32) for a in args)

    conv_args, conv_states, conv_ints = conv_inputs(rng, 33, 4, [5, 1, 9], [1, 0, 0], 4)
    check(be, "causal_conv1d", f16(conv_args), conv_states, conv_ints, dtype="f16")
    scan_args, scan_states, scan_ints = scan_inputs(rng, 6, 4, 2, 8, [5, 1, 9], [1, 0, 0], 4, False)
    check(be, "ssm_scan", f16(scan_args), scan_states, scan_ints, dtype="f16")
