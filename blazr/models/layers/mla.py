"""Multi-head latent attention (DeepSeek-V2, V2-Lite, V3): the KV cache holds one compressed latent per token.

Per token the checkpoint makes a latent c = RMSNorm(kv_a(x)[:r]) of kv_lora_rank r and one rotary key k_pe of
qk_rope_head_dim p shared by every head; head h's key is [W_UK[h] c, k_pe] and its value W_UV[h] c, with W_UK
and W_UV the two parts of kv_b_proj. The cache keeps [c, k_pe] (r + p values a token and layer: 576 for
DeepSeek-V2, against 2 H (128 + 64) expanded), and the weights are absorbed as in the DeepSeek-V2 paper and
llama.cpp: head h's query becomes [W_UK[h]^T q_nope[h], q_pe[h]], which scores against the cached latent as
the expanded key would, and attention returns sum_j p_j [c_j, k_pe_j] per head, whose first r values W_UV[h]
turns into the head's value. So the paged attention op runs multi-query attention with one KV head of
r + p features, the one cache array serving as keys and values. Prompts and decode steps take this one path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from blazr.models.base import Array, Step, host_array, load_tensor, trace
from blazr.models.layers.module import Module, Weight, weight


@dataclass(frozen=True)
class LatentShape:
    hidden: int  # D
    heads: int  # H
    q_lora_rank: int | None  # queries through q_a (D -> q_lora_rank), RMSNorm, q_b; None: one q_proj
    kv_lora_rank: int  # r
    nope_dim: int  # qk_nope_head_dim: the non-rotary part of each head's query and key
    rope_dim: int  # p: qk_rope_head_dim, the rotary part (one key for every head)
    v_dim: int  # v_head_dim
    eps: float  # of q_a_layernorm and kv_a_layernorm
    rope_style: str = "interleaved"  # DeepSeek's pairs (2i, 2i + 1); "neox" with V3's rope_interleave false

    @property
    def latent(self) -> int:
        """Values a token takes in the cache: r + p."""
        return self.kv_lora_rank + self.rope_dim


class LatentAttention(Module):
    """DeepSeek's attention on a latent cache. `scale` is the q.k scale of the expanded heads (transformers':
    (nope + p)^-1/2, times YaRN's mscale_all_dim factor squared); `rope_gain` the YaRN attention factor
    squared, which the expanded form applies to the rotary part of q.k through cos and sin."""

    LINEARS = ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj", "o_proj")

    def __init__(
        self, backend, shape: LatentShape, layer: int, inv_freq: Array, scale: float, rope_gain: float
    ):
        self.be, self.s, self.layer, self.inv_freq = backend, shape, layer, inv_freq
        self.scale, self.rope_gain = scale, rope_gain
        self.q_proj = self.q_a_proj = self.q_a_norm = self.q_b_proj = None
        self.kv_a_proj = self.kv_a_norm = self.kv_b_proj = self.o_proj = None
        self.w_uk = self.w_uv = None  # (H, r, nope) and (H, v, r): kv_b_proj split per head, made at load
        self._heads: dict[int, Array] = {}  # T -> (T H, 1) int32 head index of each query row

    def ops(self) -> set[str]:
        return {"matmul", "rms_norm", "rope", "concat", "kv_write", "attention", "matmul_experts", "binary"}

    def declare(self) -> Iterator[Weight]:
        s = self.s
        q_rows = s.heads * (s.nope_dim + s.rope_dim)
        if s.q_lora_rank is None:
            yield weight("q_proj", "q_proj.weight", (q_rows, s.hidden))  # (H (nope + p), D)
        else:
            yield weight("q_a_proj", "q_a_proj.weight", (s.q_lora_rank, s.hidden))  # (q_lora, D)
            yield weight("q_a_norm", "q_a_layernorm.weight", (s.q_lora_rank,))
            yield weight("q_b_proj", "q_b_proj.weight", (q_rows, s.q_lora_rank))  # (H (nope + p), q_lora)
        yield weight("kv_a_proj", "kv_a_proj_with_mqa.weight", (s.latent, s.hidden))  # (r + p, D)
        yield weight("kv_a_norm", "kv_a_layernorm.weight", (s.kv_lora_rank,))
        yield weight("kv_b_proj", "kv_b_proj.weight", (s.heads * (s.nope_dim + s.v_dim), s.kv_lora_rank))
        yield weight("o_proj", "o_proj.weight", (s.hidden, s.heads * s.v_dim))  # (D, H v)

    def load(self, get, upload, prefix: str = "") -> None:
        s = self.s
        for w in self.declare():
            if w.attr != "kv_b_proj":
                setattr(self, w.attr, load_tensor(get, prefix + w.names[0], upload))
        # kv_b_proj is read whole on the host (H (nope + v) x r: small) and split into the absorbed halves
        kv_b = host_array(get(prefix + "kv_b_proj.weight")).astype(np.float32)  # (H (nope + v), r)
        kv_b = kv_b.reshape(s.heads, s.nope_dim + s.v_dim, s.kv_lora_rank)  # (H, nope + v, r)
        self.w_uk = upload(np.ascontiguousarray(kv_b[:, : s.nope_dim].transpose(0, 2, 1)))  # (H, r, nope)
        self.w_uv = upload(np.ascontiguousarray(kv_b[:, s.nope_dim :]))  # (H, v, r)

    def __call__(self, x: Array, step: Step, cache: Array, _same_cache: Array) -> Array:
        be, s, i, t = self.be, self.s, self.layer, step.num_tokens
        h, r = s.heads, s.kv_lora_rank
        if s.q_lora_rank is None:
            q = self.linear(x, "q_proj")  # (T, H (nope + p))
        else:
            q = self.linear(be.rms_norm(self.linear(x, "q_a_proj"), self.q_a_norm, s.eps), "q_b_proj")
        q = q.reshape(t, h, s.nope_dim + s.rope_dim)  # (T, H, nope + p)
        q_pe = be.rope(q[:, :, s.nope_dim :], step.positions, self.inv_freq, s.rope_style)  # (T, H, p)
        if self.rope_gain != 1.0:
            q_pe = be.binary("mul", q_pe, self.rope_gain)
        kv = self.linear(x, "kv_a_proj")  # (T, r + p)
        c = be.rms_norm(kv[:, :r], self.kv_a_norm, s.eps).reshape(t, 1, r)  # (T, 1, r)
        k_pe = be.rope(kv[:, r:].reshape(t, 1, s.rope_dim), step.positions, self.inv_freq, s.rope_style)
        latent = be.concat(c, k_pe, axis=-1)  # (T, 1, r + p)
        trace("kv_latent", i, latent)
        be.kv_write(cache, cache, latent, latent, step.slots)
        heads = self._head_ids(t)  # (T H, 1)
        q_nope = q[:, :, : s.nope_dim].reshape(t * h, s.nope_dim)  # (T H, nope)
        q_lat = be.matmul_experts(q_nope, self.w_uk, heads).reshape(t, h, r)  # (T, H, r)
        q_abs = be.concat(q_lat, q_pe, axis=-1)  # (T, H, r + p)
        paged = (step.block_tables, step.ctx_lens, step.q_lens, step.block_size)
        o = be.attention(q_abs, cache, cache, *paged, self.scale)  # (T, H, r + p)
        o_lat = o[:, :, :r].reshape(t * h, r)  # (T H, r): the attention-weighted latents
        o_v = be.matmul_experts(o_lat, self.w_uv, heads).reshape(t, h * s.v_dim)  # (T, H v)
        trace("attn", i, o_v)
        return self.linear(o_v, "o_proj")  # (T, D)

    def _head_ids(self, t: int) -> Array:
        found = self._heads.get(t)
        if found is None:
            ids = np.tile(np.arange(self.s.heads, dtype=np.int32), t).reshape(-1, 1)  # (T H, 1)
            found = self._heads[t] = self.be.upload(ids)
            if len(self._heads) > 64:  # prompts of many lengths: keep the cache small
                self._heads.clear()
                self._heads[t] = found
        return found


def latent_scale(nope_dim: int, rope_dim: int, mscale_all_dim: float, factor: float) -> float:
    """transformers' DeepSeek q.k scale: (nope + p)^-1/2, times yarn_get_mscale(factor, mscale_all_dim)^2 when
    YaRN sets mscale_all_dim."""
    scale = 1.0 / math.sqrt(nope_dim + rope_dim)
    if mscale_all_dim and factor > 1:
        m = 0.1 * mscale_all_dim * math.log(factor) + 1.0
        scale *= m * m
    return scale
