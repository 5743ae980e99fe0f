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


class RotarySelfAttention(DenseSelfAttention):
    """DenseSelfAttention with q/k/v as one checkpoint tensor, optional biases, and q and k rotated (neox halves
    over the whole head) at each token's position within its sequence: ModernBERT, NomicBERT, GTE. `names` are
    the checkpoint's (qkv, out) projections relative to this layer's prefix."""

    OPS = ("matmul", "binary", "attention_dense", "rope")

    def __init__(
        self,
        backend,
        hidden: int,
        heads: int,
        layer: int,
        inv_freq: Array,
        bias: bool,
        window: int = 0,
        names: tuple[str, str] = ("Wqkv", "Wo"),
    ):
        super().__init__(backend, hidden, heads, layer, (names[0], "", "", names[1]), window=window)
        self.inv_freq, self.bias = inv_freq, bias  # (Dh/2,)

    def declare(self) -> Iterator[Weight]:
        (qkv, _, _, out), d = self.names, self.hidden
        yield weight("qkv", f"{qkv}.weight", (3 * d, d))  # (3D, D): q rows, then k, then v
        yield weight("out", f"{out}.weight", (d, d))  # (D, D)
        if self.bias:
            yield weight("qkv_bias", f"{qkv}.bias", (3 * d,))
            yield weight("out_bias", f"{out}.bias", (d,))

    def __call__(self, x: Array, seq_lens: Array, positions: Array) -> Array:
        """x (T, D), sequences of seq_lens (B,) back to back, positions (T,) within each -> (T, D)."""
        be, d, h, dh = self.be, self.hidden, self.heads, self.head_dim
        qkv = be.matmul(x, self.qkv)  # (T, 3D)
        if self.qkv_bias is not None:
            qkv = be.binary("add", qkv, self.qkv_bias)
        t = qkv.shape[0]
        qkv = qkv.reshape(t, 3 * h, dh)  # (T, 3H, Dh)
        qk = be.rope(qkv[:, : 2 * h], positions, self.inv_freq, "neox")  # (T, 2H, Dh): q and k heads
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, 2 * h :]  # (T, H, Dh) each
        att = be.attention_dense(q, k, v, seq_lens, seq_lens, dh**-0.5, False, self.window)  # (T, H, Dh)
        trace("kqv_out", self.layer, att)
        out = be.matmul(att.reshape(t, d), self.out)  # (T, D)
        return out if self.out_bias is None else be.binary("add", out, self.out_bias)
