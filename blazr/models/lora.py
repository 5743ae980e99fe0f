"""LoRA adapters applied beside the base weights, many in one batch (S-LoRA / punica style).

An adapter changes linear layers: y = x W^T + s (x A^T) B^T. The base weight W is never touched (it stays in
its packed quant format and is shared by every adapter); each adapter keeps its own small A (r, K) and B (N, r)
on the device. A layer whose weight fuses several checkpoint tensors (q/k/v as one matrix) gets one A of the
parts' ranks stacked and one B with each part's block at its rows, so one pair of matmuls covers them.

Per step, every adapter that some sequence of the batch uses adds its update to the rows of those sequences:
x A^T is masked to them (a (T, 1) 0/1 column; none when every row uses the adapter), so a row of another
adapter, or of none, gets exactly the base output. The masks are made once per step (LoraState.begin) and read
by every layer's hook.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.errors import LoraLoadError
from blazr.loaders.lora import LoraFile
from blazr.models.base import Array
from blazr.models.layers.module import Module

_ids = itertools.count(1)


@dataclass(frozen=True)
class LoraTarget:
    """A checkpoint weight an adapter may change: rows [row, row + rows) of `module`'s weight `attr`."""

    module: Module
    attr: str
    row: int  # first row of this checkpoint tensor in the (possibly fused) weight
    rows: int  # N of this tensor
    cols: int  # K
    total_rows: int  # N of the whole (fused) weight


def lora_targets(model: Module) -> dict[str, LoraTarget]:
    """Checkpoint weight name -> target, for every weight a layer multiplies through Module.linear."""
    out: dict[str, LoraTarget] = {}

    def walk(module: Module, prefix: str) -> None:
        for w in module.declare():
            if w.attr not in module.LINEARS:
                continue
            total, row = sum(s[0] for s in w.shapes), 0
            for name, shape in zip(w.names, w.shapes, strict=True):
                out[prefix + name] = LoraTarget(module, w.attr, row, shape[0], shape[1], total)
                row += shape[0]
        for child_prefix, child in module.children().items():
            walk(child, prefix + child_prefix)

    walk(model, "")
    return out


@dataclass(eq=False)
class LoraAdapter:
    """An adapter bound to one loaded model. `salt` starts its sequences' prefix-cache keys, so KV computed
    with it is never shared with the base model or another adapter (a reload gets a fresh salt)."""

    name: str
    source: str  # the file or directory it was read from
    format: str  # "peft" | "gguf"
    rank: int
    targets: int  # checkpoint weights it changes
    uid: int = field(default_factory=lambda: next(_ids))
    salt: bytes = field(default_factory=lambda: os.urandom(16))
    hooks: list[LoraHook] = field(default_factory=list, repr=False)

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.source, "format": self.format, "rank": self.rank}


class LoraState:
    """The adapters of the step being run: [(uid, mask (T, 1) or None)], set by begin() before the layers."""

    def __init__(self, backend, dtype: str):
        self.be, self.dtype = backend, dtype
        self.active: list[tuple[int, Array | None]] = []

    def begin(self, adapters: tuple | None, q_lens: np.ndarray) -> None:
        """adapters: each sequence's LoraAdapter or None (B,), q_lens (B,) its new tokens; None: no adapter."""
        self.active = []
        if adapters is None:
            return
        uids = np.array([a.uid if a is not None else 0 for a in adapters])  # (B,)
        for uid in sorted(set(uids.tolist()) - {0}):
            if (uids == uid).all():
                self.active.append((uid, None))
                continue
            mask = np.repeat((uids == uid).astype(np.float32), q_lens)[:, None]  # (T, 1)
            self.active.append((uid, self.be.upload(mask, self.dtype)))


class LoraHook:
    """One layer's adapters: (uid, attr) -> (A (r, K), B (N, r) with the scale folded in), device arrays."""

    def __init__(self, backend, state: LoraState):
        self.be, self.state = backend, state
        self.pairs: dict[tuple[int, str], tuple[Array, Array]] = {}

    def apply(self, x: Array, out: Array, attr: str) -> Array:
        """out (T, N) = x (T, K) @ W.T; adds each active adapter's s (x A^T) B^T to its sequences' rows."""
        be = self.be
        for uid, mask in self.state.active:
            pair = self.pairs.get((uid, attr))
            if pair is None:
                continue
            xa = be.matmul(x, pair[0])  # (T, r)
            if mask is not None:
                xa = be.binary("mul", xa, mask)  # (T, r): zero on the rows of other sequences
            out = be.binary("add", out, be.matmul(xa, pair[1]))  # (T, N)
        return out


def bind_adapter(model: Any, name: str, lora: LoraFile) -> LoraAdapter:
    """Put `lora`'s pairs on the model's device and hook them into its layers; raise LoraLoadError naming the
    tensors that the model lacks or whose shapes differ (an adapter for another base model)."""
    targets = lora_targets(model)
    missing = sorted(n for n in lora.pairs if n not in targets)
    if missing:
        known = sorted({n.rsplit(".", 2)[-2] for n in targets})
        raise LoraLoadError(
            f"{lora.path}: the adapter changes {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}, "
            f"which this model does not have (its adaptable layers: {', '.join(known)}); an adapter for "
            "another base model?"
        )
    groups: dict[tuple[int, str], list[tuple[LoraTarget, Any]]] = {}
    for tensor_name, pair in lora.pairs.items():
        t = targets[tensor_name]
        if pair.a.shape[1] != t.cols or pair.b.shape[0] != t.rows:
            raise LoraLoadError(
                f"{lora.path}: {tensor_name} has A {tuple(pair.a.shape)} and B {tuple(pair.b.shape)}, but the "
                f"model's weight is ({t.rows}, {t.cols}); an adapter for another base model?"
            )
        groups.setdefault((id(t.module), t.attr), []).append((t, pair))
    state = model.lora_state
    if state is None:
        state = model.lora_state = LoraState(model.be, model.dtype)
    adapter = LoraAdapter(name, str(lora.path), lora.format, lora.rank, len(lora.pairs))
    for parts in groups.values():
        module, attr = parts[0][0].module, parts[0][0].attr
        a, b = _stacked(parts)
        if module.lora is None:
            module.lora = LoraHook(model.be, state)
        module.lora.pairs[(adapter.uid, attr)] = (
            model.be.upload(a, model.dtype),
            model.be.upload(b, model.dtype),
        )
        if module.lora not in adapter.hooks:
            adapter.hooks.append(module.lora)
    return adapter


def unbind_adapter(model: Any, adapter: LoraAdapter) -> None:
    """Drop the adapter's arrays from every layer; a layer left without adapters goes back to plain matmuls."""
    for hook in adapter.hooks:
        for key in [k for k in hook.pairs if k[0] == adapter.uid]:
            del hook.pairs[key]
    for target in lora_targets(model).values():
        if target.module.lora is not None and not target.module.lora.pairs:
            target.module.lora = None
    adapter.hooks.clear()


def _stacked(parts: list[tuple[LoraTarget, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """A (sum r, K) of the parts' A stacked, and B (N, sum r) with part p's scaled B at its rows and columns."""
    total = parts[0][0].total_rows
    a = np.concatenate([pair.a for _, pair in parts]).astype(np.float32)  # (sum r, K)
    b = np.zeros((total, a.shape[0]), dtype=np.float32)  # (N, sum r)
    col = 0
    for target, pair in parts:
        r = pair.a.shape[0]
        b[target.row : target.row + target.rows, col : col + r] = pair.b * np.float32(pair.scale)
        col += r
    return a, b
