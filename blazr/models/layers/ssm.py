"""Mamba2's mixer (the SSD layer of Mamba2, Bamba / Granite-4.0-H, Falcon-H1, Nemotron-H, Zamba2).

in_proj makes, per token, the gate z (d_inner), the convolution's input xBC (d_inner + 2 G N) and the step
sizes dt (H). xBC goes through a depthwise causal convolution (kernel K, SiLU) that carries each sequence's
last K - 1 inputs in its state slot, and splits into x (H heads of P), B and C (G groups of N). The selective
scan runs x through each head's N-state recurrence (decay exp(dt A), input dt x B, read-out C, skip D x) from
the sequence's slot; the result, gated by SiLU(z), is RMS-normalised over groups of d_inner / G features (or
normalised before the gate, or not at all: SSMShape.norm) and projected back by out_proj. Prompts and decode
steps take the same two ops (causal_conv1d, ssm_scan), which run every sequence of a batch in one call.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from blazr.errors import CheckpointError
from blazr.models.base import Array, Step, host_array, load_tensor, trace
from blazr.models.layers.module import Module, Weight, weight

# the gate and the norm: RMSNorm(y SiLU(z)) (Mamba2, Bamba, ...), RMSNorm(y) SiLU(z), or y SiLU(z) alone
NORMS = ("after_gate", "before_gate", "none")


@dataclass(frozen=True)
class SSMShape:
    hidden: int  # D
    heads: int  # H
    head_dim: int  # P
    groups: int  # G: heads h read B and C of group h // (H / G)
    state: int  # N
    conv_kernel: int  # K
    eps: float  # of the gated RMSNorm
    bias: bool = False  # in_proj and out_proj have biases
    conv_bias: bool = True
    dt_limit: tuple[float, float] = (0.0, math.inf)  # dt clamped to this range after softplus
    out_bias: bool | None = None  # out_proj has a bias (None: as `bias`; Falcon-H1's projectors_bias)
    norm: str = "after_gate"  # one of NORMS: where the gated RMSNorm sits, or "none" (Falcon-H1's options)

    def __post_init__(self):
        if self.norm not in NORMS:
            raise ValueError(f"SSMShape.norm {self.norm!r}: one of {', '.join(NORMS)}")

    @property
    def has_out_bias(self) -> bool:
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def inner(self) -> int:
        """d_inner = H P."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution: x, B and C."""
        return self.inner + 2 * self.groups * self.state


class Mamba2Mixer(Module):
    """One Mamba2 layer's mixer; its cache entry is an SSMStateCache (conv (S, K - 1, conv_dim), ssm (S, H, P, N))."""

    OPS = ("matmul", "causal_conv1d", "ssm_scan", "act", "binary", "glu", "rms_norm")
    LINEARS = ("in_proj", "out_proj")

    def __init__(self, backend, shape: SSMShape, layer: int):
        self.be, self.s, self.layer = backend, shape, layer
        self.in_proj = self.in_proj_bias = self.out_proj = self.out_proj_bias = None
        self.conv_w = self.conv_b = None  # (conv_dim, K), (conv_dim,)
        self.dt_bias = self.A = self.D = None  # (H,) each; A = -exp(A_log)
        self.norm_w = None  # (d_inner,)
        self._ones: Array | None = None  # (d_inner / G,) the group norm's unit weight when G > 1

    def declare(self) -> Iterator[Weight]:
        s = self.s
        proj = s.inner + s.conv_dim + s.heads
        yield weight("in_proj", "in_proj.weight", (proj, s.hidden))  # (d_inner + conv_dim + H, D)
        if s.bias:
            yield weight("in_proj_bias", "in_proj.bias", (proj,))
        yield weight("conv_w", "conv1d.weight", (s.conv_dim, 1, s.conv_kernel))  # (conv_dim, 1, K)
        if s.conv_bias:
            yield weight("conv_b", "conv1d.bias", (s.conv_dim,))
        yield weight("dt_bias", "dt_bias", (s.heads,))
        yield weight("A", "A_log", (s.heads,))
        yield weight("D", "D", (s.heads,))
        if s.norm != "none":
            yield weight("norm_w", "norm.weight", (s.inner,))
        yield weight("out_proj", "out_proj.weight", (s.hidden, s.inner))  # (D, d_inner)
        if s.has_out_bias:
            yield weight("out_proj_bias", "out_proj.bias", (s.hidden,))

    def load(self, get, upload, prefix: str = "") -> None:
        s = self.s
        for w in self.declare():
            if w.attr not in ("conv_w", "A"):
                setattr(self, w.attr, load_tensor(get, prefix + w.names[0], upload))
        conv = host_array(get(prefix + "conv1d.weight")).astype(np.float32)  # (conv_dim, 1, K)
        self.conv_w = upload(np.ascontiguousarray(conv.reshape(s.conv_dim, s.conv_kernel)))  # (conv_dim, K)
        a_log = host_array(get(prefix + "A_log")).astype(np.float64)  # (H,)
        self.A = upload((-np.exp(a_log)).astype(np.float32))  # (H,) decay rates, negative
        if s.groups > 1 and s.norm != "none":
            self._ones = upload(np.ones(s.inner // s.groups, np.float32))

    def __call__(self, x: Array, step: Step, conv_states: Array, ssm_states: Array) -> Array:
        be, s, t, i = self.be, self.s, step.num_tokens, self.layer
        seqs = (step.state_slots, step.q_lens, step.fresh)
        proj = self.linear(x, "in_proj")  # (T, d_inner + conv_dim + H)
        if self.in_proj_bias is not None:
            proj = be.binary("add", proj, self.in_proj_bias)
        z = proj[:, : s.inner]  # (T, d_inner)
        xbc = proj[:, s.inner : s.inner + s.conv_dim]  # (T, conv_dim)
        dt = be.act(be.binary("add", proj[:, s.inner + s.conv_dim :], self.dt_bias), "softplus")  # (T, H)
        if s.dt_limit != (0.0, math.inf):
            dt = be.binary("min", be.binary("max", dt, float(s.dt_limit[0])), float(s.dt_limit[1]))
        xbc = be.causal_conv1d(xbc, self.conv_w, self.conv_b, conv_states, *seqs, "silu")  # (T, conv_dim)
        trace("ssm_conv", i, xbc)
        gn = s.groups * s.state
        xs = xbc[:, : s.inner].reshape(t, s.heads, s.head_dim)  # (T, H, P)
        b = xbc[:, s.inner : s.inner + gn].reshape(t, s.groups, s.state)  # (T, G, N)
        c = xbc[:, s.inner + gn :].reshape(t, s.groups, s.state)  # (T, G, N)
        y = be.ssm_scan(xs, dt, self.A, b, c, self.D, ssm_states, *seqs)  # (T, H, P)
        trace("ssm_scan", i, y)
        y = y.reshape(t, s.inner)  # (T, d_inner)
        if s.norm == "before_gate":
            y = self._group_norm(y, t)
        y = be.glu(z, y, "silu")  # (T, d_inner) = y SiLU(z)
        if s.norm == "after_gate":
            y = self._group_norm(y, t)
        out = self.linear(y, "out_proj")  # (T, D)
        return out if self.out_proj_bias is None else be.binary("add", out, self.out_proj_bias)

    def _group_norm(self, y: Array, t: int) -> Array:
        """The gated norm's RMSNorm: y (T, d_inner) -> (T, d_inner)."""
        be, s = self.be, self.s
        if s.groups == 1:
            return be.rms_norm(y, self.norm_w, s.eps)  # (T, d_inner)
        # RMS over each group of d_inner / G features, then the full weight
        group = s.inner // s.groups
        y = be.rms_norm(y.reshape(t * s.groups, group), self._ones, s.eps).reshape(t, s.inner)
        return be.binary("mul", y, self.norm_w)  # (T, d_inner)

    def make_state(self, num_seqs: int) -> tuple[Array, Array]:
        """(conv (num_seqs, K - 1, conv_dim), ssm (num_seqs, H, P, N)), float32 and zeroed."""
        s, be = self.s, self.be
        conv = be.upload(np.zeros((num_seqs, s.conv_kernel - 1, s.conv_dim), np.float32), "f32")
        ssm = be.upload(np.zeros((num_seqs, s.heads, s.head_dim, s.state), np.float32), "f32")
        return conv, ssm


def check_ssm_tensors(weights: dict, prefix: str, s: SSMShape) -> None:
    """One message naming the tensor when a checkpoint's conv kernel or state size disagrees with its config."""
    sizes = f"d_inner + 2 n_groups state_size = {s.conv_dim} (state_size {s.state}, n_groups {s.groups})"
    check_conv_weight(weights, prefix + "conv1d.weight", s.conv_dim, s.conv_kernel, sizes)


def check_conv_weight(weights: dict, name: str, channels: int, kernel: int, sizes: str) -> None:
    """A Mamba conv1d weight (C, 1, K) whose kernel or channels differ from the config's: a CheckpointError
    naming the tensor (`sizes`: how the config gives C)."""
    conv = weights.get(name)
    if conv is None:
        return  # the strict load reports a missing tensor
    shape = tuple(conv.shape)
    if shape[-1] != kernel:
        raise CheckpointError(f"{name} has a kernel of {shape[-1]} but the config's conv_kernel is {kernel}")
    if shape[0] != channels:
        raise CheckpointError(f"{name} has {shape[0]} channels but the config's sizes give {sizes}")
