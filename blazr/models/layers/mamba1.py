"""Mamba (1)'s mixer, the selective-scan layer of Mamba and Falcon-Mamba (and the Mamba layers of Jamba).

in_proj makes, per token, the scan's input x and the gate z (d_inner each). x goes through the depthwise causal
convolution (kernel K, SiLU) that carries each sequence's last K - 1 inputs in its state slot; x_proj turns it
into a low-rank step size (time_step_rank values), B and C (N each, shared by every channel), and dt_proj
widens the step size to one per channel (then softplus). Each of the d_inner channels has its own N decay
rates A: the scan is ssm_scan with H = d_inner heads of one feature (P = 1), one group and A of shape (H, N).
Its output, gated by SiLU(z), goes through out_proj. Falcon-Mamba RMS-normalises dt, B and C (no weights)
before use, Jamba with weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from blazr.models.base import Array, Step, host_array, load_tensor, trace
from blazr.models.layers.module import Module, Weight, weight


@dataclass(frozen=True)
class MambaShape:
    hidden: int  # D
    inner: int  # d_inner (I)
    state: int  # N
    conv_kernel: int  # K
    dt_rank: int  # R: time_step_rank
    bias: bool = False  # in_proj and out_proj have biases
    conv_bias: bool = True
    dt_bc_rms_eps: float | None = None  # an RMSNorm of dt, B and C with this eps (Falcon-Mamba, Jamba)
    dt_bc_weights: bool = False  # ... with weights (Jamba: dt_layernorm, b_layernorm, c_layernorm)


class MambaMixer(Module):
    """One Mamba layer's mixer; its cache entry is an SSMStateCache (conv (S, K - 1, I), ssm (S, I, 1, N))."""

    OPS = ("matmul", "causal_conv1d", "ssm_scan", "act", "binary", "glu")
    LINEARS = ("in_proj", "x_proj", "dt_proj", "out_proj")

    def __init__(self, backend, shape: MambaShape, layer: int):
        self.be, self.s, self.layer = backend, shape, layer
        self.in_proj = self.in_proj_bias = self.x_proj = self.dt_proj = self.dt_bias = None
        self.out_proj = self.out_proj_bias = None
        self.conv_w = self.conv_b = None  # (I, K), (I,)
        self.A = self.D = None  # (I, N) = -exp(A_log), (I,)
        self._ones: dict[int, Array] = {}  # width -> (width,) unit weight of Falcon-Mamba's weightless norms
        self.dt_norm = self.b_norm = self.c_norm = None  # (R,), (N,), (N,): Jamba's norm weights

    def ops(self) -> set[str]:
        return set(self.OPS) | ({"rms_norm"} if self.s.dt_bc_rms_eps is not None else set())

    def declare(self) -> Iterator[Weight]:
        s = self.s
        yield weight("in_proj", "in_proj.weight", (2 * s.inner, s.hidden))  # (2I, D): x rows, then z rows
        if s.bias:
            yield weight("in_proj_bias", "in_proj.bias", (2 * s.inner,))
        yield weight("conv_w", "conv1d.weight", (s.inner, 1, s.conv_kernel))  # (I, 1, K)
        if s.conv_bias:
            yield weight("conv_b", "conv1d.bias", (s.inner,))
        yield weight("x_proj", "x_proj.weight", (s.dt_rank + 2 * s.state, s.inner))  # (R + 2N, I)
        yield weight("dt_proj", "dt_proj.weight", (s.inner, s.dt_rank))  # (I, R)
        yield weight("dt_bias", "dt_proj.bias", (s.inner,))
        yield weight("A", "A_log", (s.inner, s.state))
        yield weight("D", "D", (s.inner,))
        yield weight("out_proj", "out_proj.weight", (s.hidden, s.inner))  # (D, I)
        if s.bias:
            yield weight("out_proj_bias", "out_proj.bias", (s.hidden,))
        if s.dt_bc_weights:
            yield weight("dt_norm", "dt_layernorm.weight", (s.dt_rank,))
            yield weight("b_norm", "b_layernorm.weight", (s.state,))
            yield weight("c_norm", "c_layernorm.weight", (s.state,))

    def load(self, get, upload, prefix: str = "") -> None:
        s = self.s
        for w in self.declare():
            if w.attr not in ("conv_w", "A"):
                setattr(self, w.attr, load_tensor(get, prefix + w.names[0], upload))
        conv = host_array(get(prefix + "conv1d.weight")).astype(np.float32)  # (I, 1, K)
        self.conv_w = upload(np.ascontiguousarray(conv.reshape(s.inner, s.conv_kernel)))  # (I, K)
        a_log = host_array(get(prefix + "A_log")).astype(np.float64)  # (I, N)
        self.A = upload((-np.exp(a_log)).astype(np.float32))  # (I, N) decay rates, negative
        if s.dt_bc_rms_eps is not None and not s.dt_bc_weights:
            self._ones = {n: upload(np.ones(n, np.float32)) for n in {s.dt_rank, s.state}}

    def __call__(self, x: Array, step: Step, conv_states: Array, ssm_states: Array) -> Array:
        be, s, t, i = self.be, self.s, step.num_tokens, self.layer
        seqs = (step.state_slots, step.q_lens, step.fresh)
        proj = self.linear(x, "in_proj")  # (T, 2I)
        if self.in_proj_bias is not None:
            proj = be.binary("add", proj, self.in_proj_bias)
        xs = be.causal_conv1d(
            proj[:, : s.inner], self.conv_w, self.conv_b, conv_states, *seqs, "silu"
        )  # (T, I)
        trace("ssm_conv", i, xs)
        dbc = self.linear(xs, "x_proj")  # (T, R + 2N)
        r, n = s.dt_rank, s.state
        dt, b, c = dbc[:, :r], dbc[:, r : r + n], dbc[:, r + n :]  # (T, R), (T, N), (T, N)
        if s.dt_bc_rms_eps is not None:
            eps = s.dt_bc_rms_eps
            if s.dt_bc_weights:
                norms = (self.dt_norm, self.b_norm, self.c_norm)
            else:
                norms = (self._ones[r], self._ones[n], self._ones[n])
            dt, b, c = (be.rms_norm(v, w, eps) for v, w in zip((dt, b, c), norms, strict=True))
        dt = be.act(be.binary("add", self.linear(dt, "dt_proj"), self.dt_bias), "softplus")  # (T, I)
        b, c = b.reshape(t, 1, n), c.reshape(t, 1, n)  # (T, 1, N): one group
        y = be.ssm_scan(xs.reshape(t, s.inner, 1), dt, self.A, b, c, self.D, ssm_states, *seqs)  # (T, I, 1)
        trace("ssm_scan", i, y)
        y = be.glu(proj[:, s.inner :], y.reshape(t, s.inner), "silu")  # (T, I) = y SiLU(z)
        out = self.linear(y, "out_proj")  # (T, D)
        return out if self.out_proj_bias is None else be.binary("add", out, self.out_proj_bias)

    def make_state(self, num_seqs: int) -> tuple[Array, Array]:
        """(conv (num_seqs, K - 1, I), ssm (num_seqs, I, 1, N)), float32 and zeroed."""
        s, be = self.s, self.be
        conv = be.upload(np.zeros((num_seqs, s.conv_kernel - 1, s.inner), np.float32), "f32")
        ssm = be.upload(np.zeros((num_seqs, s.inner, 1, s.state), np.float32), "f32")
        return conv, ssm
