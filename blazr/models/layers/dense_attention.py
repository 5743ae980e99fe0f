"""Self-attention over whole sequences of a packed batch, without a KV cache: encoders (BERT and kin)."""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.base import Array, trace
from blazr.models.layers.module import Module, Weight, fused, weight


class DenseSelfAttention(Module):
    """q/k/v projections as one (3D, D) matrix with biases (the checkpoint's query, key and value rows),
    attention of every token over its own sequence (attention_dense: block-diagonal, bidirectional unless
    `causal`), and the output projection with its bias. `names` are the checkpoint's (q, k, v, out) names
    relative to this layer's prefix (BERT: self.query, self.key, self.value, output.dense)."""

    OPS = ("matmul", "binary", "attention_dense")

    def __init__(
        self,
        backend,
        hidden: int,
        heads: int,
        layer: int,
        names: tuple[str, str, str, str],
        causal: bool = False,
        window: int = 0,
    ):
        self.be, self.hidden, self.heads, self.layer = backend, hidden, heads, layer
        self.head_dim = hidden // heads
        self.names, self.causal, self.window = names, causal, window
        self.qkv = self.qkv_bias = self.out = self.out_bias = None  # (3D, D), (3D,), (D, D), (D,)

    def declare(self) -> Iterator[Weight]:
        q, k, v, o = self.names
        d = self.hidden
        yield fused("qkv", [(f"{n}.weight", (d, d)) for n in (q, k, v)])  # (3D, D)
        yield fused("qkv_bias", [(f"{n}.bias", (d,)) for n in (q, k, v)])  # (3D,)
        yield weight("out", f"{o}.weight", (d, d))  # (D, D)
        yield weight("out_bias", f"{o}.bias", (d,))  # (D,)

    def __call__(self, x: Array, seq_lens: Array, rel_bias: Array | None = None) -> Array:
        """x (T, D) holding sequences of seq_lens (B,) tokens back to back -> (T, D). rel_bias (H, 2R + 1)
        or None: attention_dense's relative position bias (MPNet's)."""
        be, d, h, dh = self.be, self.hidden, self.heads, self.head_dim
        qkv = be.binary("add", be.matmul(x, self.qkv), self.qkv_bias)  # (T, 3D)
        t = qkv.shape[0]
        qkv = qkv.reshape(t, 3 * h, dh)  # (T, 3H, Dh)
        q, k, v = qkv[:, :h], qkv[:, h : 2 * h], qkv[:, 2 * h :]  # (T, H, Dh) each
        att = be.attention_dense(
            q, k, v, seq_lens, seq_lens, dh**-0.5, self.causal, self.window, rel_bias
        )  # (T, H, Dh)
        trace("kqv_out", self.layer, att)
        return be.binary("add", be.matmul(att.reshape(t, d), self.out), self.out_bias)  # (T, D)
