"""VITS's normalising flow (`flow`), run in reverse: prior samples z_p (C, F) -> latent z for the decoder.

Stored as [coupling, Flip] x n. A coupling layer (mean only) updates one half of the channels by a WaveNet
of the other half; Flip reverses the channel order. Rather than move data, the flips are folded into the
coupling layers' first and last 1x1 convolutions at load (Model.sanitize): each layer reads the full
(C, F) array through a `pre` weight whose unread half is zero and writes a full-width update through a
`post` weight whose untouched half is zero, in the channel order the flips leave.
"""

from __future__ import annotations

import numpy as np

from blazr.models.base import Array
from blazr.models.layers.conv import Conv1d
from blazr.models.layers.module import Module


class WaveNet(Module):
    """Gated dilated convolutions (tanh * sigmoid) with residual and skip 1x1 convolutions; returns the sum
    of the skips. A speaker embedding g (E, 1) adds, through one 1x1 `cond_layer` (2H * layers outputs),
    a constant per channel to each layer's dilated convolution."""

    OPS = ("act", "glu", "binary")

    def __init__(self, be, hidden: int, kernel: int, dilation_rate: int, n_layers: int, cond: int = 0):
        self.be, self.h, self.n = be, hidden, n_layers
        self.cond_layer = Conv1d(be, cond, 2 * hidden * n_layers, 1) if cond else None
        self.in_layers = [
            Conv1d(be, hidden, 2 * hidden, kernel, dilation=dilation_rate**i) for i in range(n_layers)
        ]
        self.res_skip = [
            Conv1d(be, hidden, 2 * hidden if i < n_layers - 1 else hidden, 1) for i in range(n_layers)
        ]

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {f"in_layers.{i}.": layer for i, layer in enumerate(self.in_layers)}
        out |= {"cond_layer.": self.cond_layer} if self.cond_layer is not None else {}
        return out | {f"res_skip_layers.{i}.": layer for i, layer in enumerate(self.res_skip)}

    def __call__(self, x: Array, g: Array | None = None) -> Array:
        """x (H, F), g (E, 1) or None -> (H, F)."""
        be, h, out = self.be, self.h, None
        cond = self.cond_layer(g) if g is not None and self.cond_layer is not None else None  # (2H * n, 1)
        for i in range(self.n):
            x_in = self.in_layers[i](x)  # (2H, F)
            if cond is not None:
                x_in = be.binary("add", x_in, cond[2 * h * i : 2 * h * (i + 1)])
            acts = be.glu(x_in[h:], be.act(x_in[:h], "tanh"), "sigmoid")  # (H, F)
            res_skip = self.res_skip[i](acts)  # (2H or H, F)
            if i < self.n - 1:
                x = be.binary("add", x, res_skip[:h])
                skip = res_skip[h:]
            else:
                skip = res_skip
            out = skip if out is None else be.binary("add", out, skip)
        return out


class Coupling(Module):
    """One mean-only coupling layer in reverse: z -= post(WaveNet(pre(z))), with pre/post widened to the full
    channel count (see the module docstring)."""

    OPS = ("binary",)

    def __init__(self, be, a):
        c, h = a.flow_size, a.hidden_channels
        self.be = be
        self.pre = Conv1d(be, c, h, 1)
        self.enc = WaveNet(
            be,
            h,
            a.wavenet_kernel_size,
            a.wavenet_dilation_rate,
            a.prior_encoder_num_wavenet_layers,
            getattr(a, "speaker_embedding_size", 0),
        )
        self.post = Conv1d(be, h, c, 1)

    def children(self) -> dict[str, Module]:
        return {"pre.": self.pre, "enc.": self.enc, "post.": self.post}

    def reverse(self, z: Array, g: Array | None = None) -> Array:
        """z (C, F), g (E, 1) or None -> (C, F)."""
        return self.be.binary("sub", z, self.post(self.enc(self.pre(z), g)))


def fold_flips(weights: dict[str, np.ndarray], prefix: str, n_layers: int) -> dict[str, np.ndarray]:
    """Widen coupling layers' pre (H, C/2, 1) and post (C/2, H, 1) weights to (H, C, 1) and (C, H, 1) with
    the flips folded in (module docstring). Returns the new entries; raises ValueError if the flips leave
    the channels reversed at the end (not a VITS layout: the decoder would read them reversed)."""
    out: dict[str, np.ndarray] = {}
    flipped = False  # whether the data in the flips' order is the stored order reversed
    # reverse order: Flip, coupling n-1, Flip, coupling n-2, ..., Flip, coupling 0
    for layer in reversed(range(n_layers)):
        flipped = not flipped
        name = f"{prefix}{2 * layer}."
        pre, post, post_b = (
            weights[name + "pre.weight"],
            weights[name + "post.weight"],
            weights[name + "post.bias"],
        )
        half = pre.shape[1]
        wide_pre = np.zeros((pre.shape[0], 2 * half, 1), dtype=np.float32)
        wide_post = np.zeros((2 * half, post.shape[1], 1), dtype=np.float32)
        wide_b = np.zeros(2 * half, dtype=np.float32)
        if flipped:  # the layer's x0 (first half) is the stored second half reversed; it updates the first
            wide_pre[:, half:] = pre[:, ::-1]
            wide_post[:half], wide_b[:half] = post[::-1], post_b[::-1]
        else:
            wide_pre[:, :half] = pre
            wide_post[half:], wide_b[half:] = post, post_b
        out |= {name + "pre.weight": wide_pre, name + "post.weight": wide_post, name + "post.bias": wide_b}
    if flipped:
        raise ValueError("the flow's flips leave the channels reversed")
    return out
