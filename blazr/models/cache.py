"""The typed per-layer cache entries a model's `make_cache` returns, beside the paged KV pair (k, v).

Attention layers keep a paged (k, v) pair (or one latent array twice: blazr.models.layers.mla); a state-space
layer keeps an SSMStateCache: one slot per running sequence, of a size that does not grow with its length; a
layer with both (Falcon-H1) keeps a ParallelCache of the two, and kv_arrays says what grows per block. A
model that has any sets `stateful = True`, and its make_cache takes `num_seqs`, the slots to allocate; the
engine then hands each running sequence a slot (blazr.engine.state_pool) and turns the prefix cache off (a
block of cached keys says nothing of the recurrent state after it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

Array = Any


class SSMStateCache(NamedTuple):
    """One Mamba layer's states, indexed by slot (ForwardBatch.state_slots)."""

    conv: Array  # (S, K - 1, C) the last K - 1 inputs of the causal convolution
    ssm: Array  # (S, H, P, N) float32 recurrent state


def is_stateful(model: Any) -> bool:
    """Whether the model keeps a per-sequence recurrent state (needs state slots, no prefix cache)."""
    return bool(getattr(model, "stateful", False))


class ParallelCache(NamedTuple):
    """A layer that runs attention and a Mamba mixer side by side (Falcon-H1): its paged (k, v) pair and its
    state slots. Unpacks as (kv, state) where a decoder's loop unpacks (k_cache, v_cache)."""

    kv: tuple[Array, Array]  # (k, v), each (num_blocks * block_size, Hkv, Dh)
    state: SSMStateCache


def kv_arrays(entry: Any) -> tuple[Array, ...]:
    """The per-block arrays of one layer's cache entry: its keys and values (none for a state-only layer)."""
    if isinstance(entry, SSMStateCache):
        return ()  # per sequence, not per block
    if isinstance(entry, ParallelCache):
        return tuple(entry.kv)
    return tuple(entry)
