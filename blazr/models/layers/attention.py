"""Self-attention over the paged KV cache, with the options decoder families differ in."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from blazr.models.base import Array, Step, trace
from blazr.models.layers.module import Module, Weight, fused, weight


@dataclass(frozen=True)
class AttentionShape:
    """Sizes and options of one attention layer (the same for most layers of a model)."""

    hidden: int  # D
    heads: int  # H query heads
    kv_heads: int  # Hkv: H // Hkv query heads share each KV head (GQA; 1 is multi-query)
    head_dim: int  # Dh
    qkv_bias: bool = False
    o_bias: bool = False
    rot_dim: int | None = None  # rotate only the first rot_dim features of a head (partial rotary)
    rope_style: str = "neox"  # "neox" (HF halves) or "interleaved" (GPT-J pairs)
    scale: float | None = None  # q.k scale; default 1 / sqrt(Dh)
    softcap: float = 0.0  # softcap * tanh(score / softcap) before the softmax (Gemma 2)
    alibi: bool = False  # ALiBi position biases instead of RoPE (Falcon-RW): see alibi_slopes
    qk_norm_eps: float | None = None  # an RMSNorm over q and k before RoPE (Qwen3, Gemma 3, OLMo 2)
    qk_norm_per_head: bool = True  # over each head's Dh (Qwen3, Gemma 3), or over all of q and of k (OLMo 2)
    fused_qkv: str | None = None  # the checkpoint's one q/k/v tensor (Phi-3 "qkv_proj"), rows q, k, v
    o_name: str = "o_proj"  # the checkpoint's output projection (Phi-2 and GPT-NeoX "dense")
    sinks: bool = False  # a learnt logit per head in the softmax's sum (GPT-OSS's attention sinks, "sinks")


def alibi_slopes(heads: int) -> np.ndarray:
    """(H,) float64 ALiBi slopes as transformers' build_alibi_tensor (Falcon, Bloom) makes them: for the
    largest power of two n <= H, 2^(-8 k / n) for k = 1..n; when H is not a power of two, the remaining
    H - n heads take every other slope of the 2n-head sequence, 2^(-4 k / n) for odd k = 1, 3, ..."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # (n,)
    if n != heads:
        extra = 2.0 ** (-4.0 * np.arange(1, 2 * min(n, heads - n), 2) / n)  # (H - n,)
        slopes = np.concatenate([slopes, extra])
    return slopes


class Attention(Module):
    """q/k/v projections as one (Nq + 2 Nkv, D) matrix (the checkpoint's q_proj, k_proj, v_proj rows), RoPE on
    q and k (or ALiBi biases in the attention op), a write to the layer's cache, attention over the context,
    and the output projection."""

    LINEARS = ("qkv_proj", "o_proj")

    def __init__(
        self,
        backend,
        shape: AttentionShape,
        layer: int,
        inv_freq: Array | None,
        window: int = 0,
        attention_scaling: float = 1.0,
    ):
        if shape.alibi and inv_freq is not None:
            raise ValueError("an ALiBi attention layer takes no RoPE frequencies")
        self.be, self.s, self.layer, self.inv_freq, self.window = backend, shape, layer, inv_freq, window
        rotates_all = shape.rot_dim is None or shape.rot_dim >= shape.head_dim
        self.rot_dim = None if rotates_all else shape.rot_dim
        # transformers scales cos and sin, so the rotated features' part of q.k grows by attention_scaling ** 2:
        # folded into the scale when every feature rotates, else a gain on q's rotated features (Phi-4-mini)
        base = shape.scale if shape.scale is not None else 1 / math.sqrt(shape.head_dim)
        self.scale = (attention_scaling**2 if rotates_all else 1.0) * base
        self.rot_gain = None if rotates_all or attention_scaling == 1.0 else attention_scaling**2
        self.q_gain = None  # (Dh,): rot_gain on the first rot_dim features, 1 on the rest; made at load
        self.qkv_proj = self.qkv_bias = self.o_proj = self.o_bias = None
        self.q_norm = self.k_norm = None  # (Dh,) each, with qk_norm_eps
        self.alibi = None  # (H,) f32 slopes times the scale, with shape.alibi; made at load
        self.sinks = None  # (H,) f32 with shape.sinks

    def ops(self) -> set[str]:
        rope = {"rope"} if self.inv_freq is not None else set()
        norm = {"rms_norm"} if self.s.qk_norm_eps is not None else set()
        return {"matmul", "binary", "kv_write", "attention"} | rope | norm

    def declare(self) -> Iterator[Weight]:
        s = self.s
        rows = {
            "q_proj": s.heads * s.head_dim,
            "k_proj": s.kv_heads * s.head_dim,
            "v_proj": s.kv_heads * s.head_dim,
        }
        if s.fused_qkv is not None:  # a family whose layout is not q, k, v rows reorders them in sanitize
            n = sum(rows.values())
            yield weight("qkv_proj", f"{s.fused_qkv}.weight", (n, s.hidden))  # (Nq + 2 Nkv, D)
            if s.qkv_bias:
                yield weight("qkv_bias", f"{s.fused_qkv}.bias", (n,))
        else:
            yield fused(
                "qkv_proj", [(f"{p}.weight", (n, s.hidden)) for p, n in rows.items()]
            )  # (Nq + 2 Nkv, D)
            if s.qkv_bias:
                yield fused("qkv_bias", [(f"{p}.bias", (n,)) for p, n in rows.items()])  # (Nq + 2 Nkv,)
        yield weight("o_proj", f"{s.o_name}.weight", (s.hidden, s.heads * s.head_dim))  # (D, Nq)
        if s.o_bias:
            yield weight("o_bias", f"{s.o_name}.bias", (s.hidden,))
        if s.qk_norm_eps is not None:
            q_dim, k_dim = (
                (s.head_dim, s.head_dim) if s.qk_norm_per_head else (rows["q_proj"], rows["k_proj"])
            )
            yield weight("q_norm", "q_norm.weight", (q_dim,))
            yield weight("k_norm", "k_norm.weight", (k_dim,))
        if s.sinks:
            yield weight("sinks", "sinks", (s.heads,))  # (H,)

    def load(self, get, upload, prefix: str = "") -> None:
        super().load(get, upload, prefix)
        if self.rot_gain is not None:  # uploaded as the weights are, so in the model's compute dtype
            gain = np.ones(self.s.head_dim, dtype=np.float32)  # (Dh,)
            gain[: self.rot_dim] = self.rot_gain
            self.q_gain = upload(gain)
        if self.s.alibi:
            # Falcon and Bloom add slope * position to q.k before the 1/sqrt(Dh) scale, the attention op after
            # it: the op's slopes are the model's times the scale. Kept in f32 whatever the compute dtype.
            slopes = (alibi_slopes(self.s.heads) * self.scale).astype(np.float32)  # (H,)
            self.alibi = self.be.upload(slopes, "f32")
        if self.sinks is not None:  # the attention op reads them in f32 whatever the compute dtype
            self.sinks = self.be.upload(np.asarray(self.be.download(self.sinks), dtype=np.float32), "f32")

    def __call__(self, x: Array, step: Step, k_cache: Array, v_cache: Array) -> Array:
        be, i, s = self.be, self.layer, self.s
        h, hkv = s.heads, s.kv_heads
        qkv = self.linear(x, "qkv_proj")  # (T, Nq + 2 Nkv)
        if self.qkv_bias is not None:
            qkv = be.binary("add", qkv, self.qkv_bias)
        qkv = qkv.reshape(step.num_tokens, h + 2 * hkv, s.head_dim)  # (T, H + 2 Hkv, Dh)
        trace("qkv", i, qkv)
        if self.inv_freq is None and self.q_norm is None:  # a layer without positions (SmolLM3's NoPE layers)
            q, k = qkv[:, :h], qkv[:, h : h + hkv]  # (T, H, Dh), (T, Hkv, Dh)
        elif self.q_norm is None:
            # q and k heads are adjacent, so one rope call rotates both: (T, H + Hkv, Dh)
            qk = be.rope(qkv[:, : h + hkv], step.positions, self.inv_freq, s.rope_style, self.rot_dim)
            q, k = qk[:, :h], qk[:, h:]  # (T, H, Dh), (T, Hkv, Dh)
            trace("qk_rope", i, qk)
        else:
            q = self._rope(self._head_norm(qkv[:, :h], self.q_norm, step), step)  # (T, H, Dh)
            k = self._rope(self._head_norm(qkv[:, h : h + hkv], self.k_norm, step), step)  # (T, Hkv, Dh)
            trace("q_rope", i, q)
            trace("k_rope", i, k)
        if self.q_gain is not None:
            q = be.binary("mul", q, self.q_gain)  # (T, H, Dh)
        v = qkv[:, h + hkv :]  # (T, Hkv, Dh)
        be.kv_write(k_cache, v_cache, k, v, step.slots)
        paged = (step.block_tables, step.ctx_lens, step.q_lens, step.block_size)
        o = be.attention(
            q, k_cache, v_cache, *paged, self.scale, self.window, s.softcap, self.alibi, self.sinks
        )  # (T, H, Dh)
        trace("attn", i, o)
        out = self.linear(o.reshape(step.num_tokens, h * s.head_dim), "o_proj")  # (T, D)
        return out if self.o_bias is None else be.binary("add", out, self.o_bias)

    def _head_norm(self, x: Array, w: Array, step: Step) -> Array:
        """RMSNorm over each head's Dh features, or over all n * Dh: x (T, n, Dh) -> (T, n, Dh)."""
        t, n, dh = step.num_tokens, x.shape[1], self.s.head_dim
        rows = (t * n, dh) if self.s.qk_norm_per_head else (t, n * dh)
        return self.be.rms_norm(x.reshape(rows), w, self.s.qk_norm_eps).reshape(t, n, dh)

    def _rope(self, x: Array, step: Step) -> Array:
        if self.inv_freq is None:
            return x
        return self.be.rope(x, step.positions, self.inv_freq, self.s.rope_style, self.rot_dim)
