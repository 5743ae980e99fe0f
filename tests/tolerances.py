"""The one tolerance table for op tests: (op, dtype) -> (rtol, atol) against the float64 reference.

A result passes when |got - want| <= atol + rtol * |want| everywhere (numpy.isclose). Start every op at the
f32 default and loosen one entry at a time, each with a one-line reason.
"""

from __future__ import annotations

import numpy as np

F32 = (1e-5, 1e-6)
F16 = (2e-2, 2e-3)

TOLERANCES: dict[tuple[str, str], tuple[float, float]] = {
    ("embed", "f32"): (0.0, 0.0),  # a row copy is exact
    ("matmul", "f32"): F32,
    ("matmul_experts", "f32"): F32,
    ("rms_norm", "f32"): F32,
    ("layer_norm", "f32"): F32,
    ("rope", "f32"): F32,
    ("kv_write", "f32"): (0.0, 0.0),  # a row copy is exact
    ("attention", "f32"): F32,
    ("attention_dense", "f32"): F32,
    ("attention_relative", "f32"): F32,
    ("softmax", "f32"): F32,
    ("glu", "f32"): F32,
    ("act", "f32"): F32,
    ("binary", "f32"): F32,
    ("topk", "f32"): (0.0, 0.0),  # values are picked, not computed
    # each output sums up to ~200 float32 products of unit-sized terms (HiFi-GAN's 7 taps x 32 channels): the
    # summation order (BLAS blocks, the CPU's direct tiles, wgpu) moves it by ~1.5e-6 absolute
    ("conv1d", "f32"): (1e-5, 1e-5),
    # HiFi-GAN's upsamplers sum ~1000 float32 products into each unit-sized output: ~2e-6 (BLAS), ~5e-6 (wgpu)
    ("conv_transpose1d", "f32"): (1e-5, 1e-5),
    ("transpose", "f32"): (0.0, 0.0),  # a copy: exact
    # each output sums N (128 in Mamba2) float32 products state * C of unit-sized terms that cancel: ~2e-6
    # absolute where the sum is small
    ("ssm_scan", "f32"): (1e-5, 1e-5),
    ("causal_conv1d", "f32"): F32,
    # the recurrence carries each step's float32 rounding into the next: ~1e-6 after tens of steps
    ("lstm", "f32"): (1e-5, 1e-5),
    # spectra compared as re/im parts: sums of N windowed float32 products of unit-sized samples
    ("stft", "f32"): (1e-5, 1e-5),
    ("istft", "f32"): (1e-5, 1e-5),
    ("instance_norm", "f32"): (1e-5, 1e-5),
    ("snake", "f32"): F32,
    ("concat", "f32"): (0.0, 0.0),  # a copy: exact
}


def tolerance(op: str, dtype: str = "f32") -> tuple[float, float]:
    """(rtol, atol) for an op; f16/bf16 entries default to F16 until an op needs its own."""
    if (op, dtype) in TOLERANCES:
        return TOLERANCES[(op, dtype)]
    if dtype in ("f16", "bf16"):
        return F16
    raise KeyError(f"no tolerance for ({op!r}, {dtype!r}); add one to tests/tolerances.py")


def assert_close(op: str, dtype: str, got, want) -> None:
    """Assert got (a backend result, downloaded) matches want (the float64 reference) within the table."""
    rtol, atol = tolerance(op, dtype)
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{op}: shape {got.shape} != reference {want.shape}"
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.abs(got - want) - rtol * np.abs(want)), got.shape)
        raise AssertionError(
            f"{op} ({dtype}): {bad.sum()} of {got.size} values off; worst at {i}: got {got[i]!r}, "
            f"want {want[i]!r} (rtol={rtol}, atol={atol})"
        )
