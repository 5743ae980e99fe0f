"""Slots: named conversations whose KV blocks stay in the cache between requests, and can be saved to a file
and restored (llama.cpp's /slots save / restore / erase, the original blazr's /api/slots).

blazr has no fixed per-conversation slots: sequences share one paged pool and reuse KV through the prefix cache.
A slot is a holder of prefix-cache blocks: a request that names it (SamplingParams.slot_id) leaves its prompt
and reply's full blocks pinned under the slot when it ends, so the next turn of that conversation finds them
even after other traffic would have evicted them. Pins are capped (MAX_PINNED_SHARE of the pool); past it the
least recently used slots let go (their blocks stay cached, as any finished request's do). `save` writes the
slot's tokens and their K/V rows of every layer to a SafeTensors file; `restore` writes them back into fresh
blocks, indexes them in the prefix cache and pins them, so a request whose prompt starts with those tokens
skips their prefill. Driven from the engine's thread only.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blazr.engine.kv_cache import KVCacheManager
from blazr.engine.prefix_cache import extend_block_keys
from blazr.errors import BlazrError, ConfigError
from blazr.models.cache import is_stateful

MAX_PINNED_SHARE = 0.5  # slots together hold at most this share of the KV pool's blocks
FORMAT = "blazr-slot-kv/1"


class SlotNotFoundError(BlazrError):
    """A slot id that no slot has."""


@dataclass
class Slot:
    id: str
    token_ids: list[int] = field(default_factory=list)  # tokens whose KV the slot holds (whole blocks)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0  # requests running in it now

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "total_tokens": len(self.token_ids),
            "idle_seconds": round(time.monotonic() - self.last_used, 3) if not self.busy else 0.0,
            "is_processing": self.busy > 0,
        }


class SlotStore:
    def __init__(self, kv: KVCacheManager, model: Any, backend: Any, cache: list):
        self.kv, self.model, self.be, self.cache = kv, model, backend, cache
        self.slots: dict[str, Slot] = {}
        self.max_pinned = int(kv.pool.num_blocks * MAX_PINNED_SHARE)

    def create(self, slot_id: str) -> Slot:
        return self.slots.setdefault(slot_id, Slot(slot_id))

    def get(self, slot_id: str) -> Slot:
        slot = self.slots.get(slot_id)
        if slot is None:
            raise SlotNotFoundError(f"slot {slot_id!r} does not exist")
        return slot

    def remove(self, slot_id: str) -> None:
        self.get(slot_id)
        self.erase(slot_id)
        del self.slots[slot_id]

    def erase(self, slot_id: str) -> int:
        """Let go of the slot's blocks; returns the tokens it held."""
        slot = self.get(slot_id)
        held = len(slot.token_ids)
        self.kv.free(_holder(slot_id))
        slot.token_ids = []
        return held

    def keep(self, slot_id: str, token_ids: list[int], keys: list[bytes]) -> None:
        """After a request in the slot ended: pin the cached blocks of its tokens (keys: their block keys)."""
        slot = self.create(slot_id)
        slot.last_used = time.monotonic()
        self.kv.free(_holder(slot_id))
        blocks = self.kv.pin(_holder(slot_id), keys)
        slot.token_ids = list(token_ids[: blocks * self.kv.block_size])
        self._within_cap(keep=slot_id)

    # ---- files -------------------------------------------------------------------------------------------

    def save(self, slot_id: str, path: Path, fingerprint: str) -> tuple[int, int]:
        """Write the slot's tokens and K/V rows to `path`; (tokens saved, bytes written)."""
        from safetensors.numpy import save_file

        tensors = self.export(slot_id)
        meta = {"format": FORMAT, "fingerprint": fingerprint, "block_size": str(self.kv.block_size)}
        partial = path.with_name(path.name + ".partial")  # a full disk leaves no half file under the name
        save_file(tensors, str(partial), metadata=meta)
        partial.replace(path)
        return len(tensors["token_ids"]), path.stat().st_size

    def restore(self, slot_id: str, path: Path, fingerprint: str) -> tuple[int, int]:
        """Read a file `save` wrote for this model into the slot (replacing what it held); (tokens, bytes)."""
        from safetensors import SafetensorError, safe_open

        self._check_kv_only()
        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
        except (SafetensorError, OSError, ValueError) as error:
            raise ConfigError(f"{path.name}: not a readable slot file ({error})") from None
        if meta.get("format") != FORMAT or "token_ids" not in tensors:
            raise ConfigError(f"{path.name}: not a slot file blazr saved")
        if meta.get("fingerprint") != fingerprint:
            raise ConfigError(f"{path.name}: it was saved from another model; restore it into that model")
        try:
            return self.load(slot_id, tensors), path.stat().st_size
        except ConfigError as error:
            raise ConfigError(f"{path.name}: {error}") from None

    # ---- in memory (disaggregated prefill hands a prompt's KV to a decode engine this way) ----------------

    def export(self, slot_id: str) -> dict[str, np.ndarray]:
        """The slot's tokens ("token_ids", (N,) int64) and K/V rows of every layer ("k.L", "v.L": (N, Hkv, Dh))."""
        self._check_kv_only()
        slot = self.get(slot_id)
        rows = self._rows(slot_id, len(slot.token_ids))  # (N,) cache slots in token order
        tensors: dict[str, np.ndarray] = {}
        index = self.be.upload(rows)
        for layer, (k, v) in enumerate(self.cache):
            for name, array in (("k", k), ("v", v)):
                flat = array.reshape(array.shape[0], -1)  # (S, Hkv * Dh)
                gathered = np.asarray(self.be.download(self.be.embed(flat, index)))  # (N, Hkv * Dh)
                tensors[f"{name}.{layer}"] = gathered.reshape(len(rows), *array.shape[1:])
        tensors["token_ids"] = np.asarray(slot.token_ids, dtype=np.int64)
        return tensors

    def load(self, slot_id: str, tensors: dict[str, np.ndarray]) -> int:
        """Write `export`'s tensors into fresh blocks held by the slot (replacing what it held), indexed in the
        prefix cache so a request whose prompt starts with those tokens skips their prefill; the tokens loaded."""
        self._check_kv_only()
        ids = [int(t) for t in tensors["token_ids"]]
        n = len(ids) - len(ids) % self.kv.block_size
        holder = _holder(slot_id)
        self.create(slot_id)
        self.erase(slot_id)
        if n > self.max_pinned * self.kv.block_size or not self.kv.can_allocate(holder, n):
            raise ConfigError(f"its {len(ids)} tokens do not fit the free KV cache now")
        for layer, (k, _) in enumerate(self.cache):
            if tuple(tensors[f"k.{layer}"].shape[1:]) != tuple(k.shape[1:]):
                raise ConfigError("its K/V rows do not have this model's shape")
        self.kv.allocate(holder, n)
        rows = self._rows(slot_id, n)  # (N,)
        for layer, (k, v) in enumerate(self.cache):
            k_rows, v_rows = tensors[f"k.{layer}"][:n], tensors[f"v.{layer}"][:n]  # (N, Hkv, Dh)
            up = self.be.upload
            self.be.kv_write(k, v, up(k_rows, self.model.dtype), up(v_rows, self.model.dtype), up(rows))
        keys = extend_block_keys([], ids, self.kv.block_size, n // self.kv.block_size)
        self.kv.commit(holder, keys, n)
        slot = self.slots[slot_id]
        slot.token_ids, slot.last_used = ids[:n], time.monotonic()
        self._within_cap(keep=slot_id)
        return n

    # ---- internals ---------------------------------------------------------------------------------------

    def _check_kv_only(self) -> None:
        if is_stateful(self.model):
            raise ConfigError(
                "slot files hold KV-cache rows; this model's state-space (Mamba) layers keep a recurrent state "
                "instead, which slots do not save or restore"
            )

    def _rows(self, slot_id: str, n: int) -> np.ndarray:
        """(n,) int32 cache slots of the slot's first n tokens."""
        table = np.asarray(self.kv.block_table(_holder(slot_id)), dtype=np.int64)
        positions = np.arange(n)
        bs = self.kv.block_size
        return (table[positions // bs] * bs + positions % bs).astype(np.int32)

    def _within_cap(self, keep: str) -> None:
        """Unpin least recently used slots while slots hold more than max_pinned blocks."""
        by_age = sorted(self.slots.values(), key=lambda s: s.last_used)
        for slot in by_age:
            if self._pinned() <= self.max_pinned:
                return
            if slot.id != keep:
                self.erase(slot.id)
        if self._pinned() > self.max_pinned:
            self.erase(keep)

    def _pinned(self) -> int:
        return sum(len(self.kv.block_table(_holder(s))) for s in self.slots)


def _holder(slot_id: str) -> tuple[str, str]:
    """The KV manager's sequence id of a slot's blocks (never equal to a Request)."""
    return ("slot", slot_id)


def model_fingerprint(checkpoint: Any) -> str:
    """What a slot file must have been saved from: the model's config and tensor names and shapes."""
    described = {
        "config": checkpoint.config,
        "tensors": sorted((n, list(t.shape)) for n, t in checkpoint.tensors.items()),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:32]
