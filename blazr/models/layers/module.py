"""Module: a layer that declares each of its weights once; shapes, the strict check and loading follow.

A layer lists its weights in `declare()` (a `Weight` each: the attribute it fills, the checkpoint tensor
names, their shapes) and its sub-layers in `children()` (checkpoint prefix -> Module). From that one list
come `weight_shapes()` (what the strict load expects) and `load()` (which tensor goes where, fused rows
stacked, quantized ones kept packed where the backend multiplies them). mlx-lm's nn.Module does the same with
reflection; an explicit list keeps fused tensors (q/k/v as one matrix) and optional ones plain to read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from blazr.models.base import Array, load_fused, load_tensor


@dataclass(frozen=True)
class Weight:
    """One device array of a layer: `attr` is filled from the checkpoint tensors `names` (several: their rows
    stacked into one matrix, so one matmul does the work of several), each of the matching shape."""

    attr: str
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]


def weight(attr: str, name: str, shape: tuple[int, ...]) -> Weight:
    return Weight(attr, (name,), (tuple(shape),))


def fused(attr: str, parts: list[tuple[str, tuple[int, ...]]]) -> Weight:
    """Rows of several checkpoint tensors as one array, in the order given."""
    return Weight(attr, tuple(n for n, _ in parts), tuple(tuple(s) for _, s in parts))


class Module:
    """Base of every layer. Subclasses set their attributes in __init__ and override declare / children, and
    list the backend ops they call in OPS (a layer whose ops depend on its options overrides ops())."""

    OPS: tuple[str, ...] = ()  # names from blazr.backends.base.OPS
    # the weights this layer multiplies through linear(): the ones a LoRA adapter may change
    LINEARS: tuple[str, ...] = ()
    lora = None  # a LoraHook (blazr.models.lora) once an adapter changes one of this layer's LINEARS

    def linear(self, x: Array, attr: str) -> Array:
        """x (T, K) @ weight.T -> (T, N) for the weight in attribute `attr`, plus the low-rank updates of the
        LoRA adapters this step's sequences use (none loaded: the plain matmul)."""
        out = self.be.matmul(x, getattr(self, attr))  # type: ignore[attr-defined]
        return out if self.lora is None else self.lora.apply(x, out, attr)

    def ops(self) -> set[str]:
        """Every backend op this module and its children call: what build_model checks the backend has."""
        out = set(self.OPS)
        for child in self.children().values():
            out |= child.ops()
        return out

    def declare(self) -> Iterator[Weight]:
        return iter(())

    def children(self) -> dict[str, Module]:
        return {}

    def weight_shapes(self, prefix: str = "") -> dict[str, tuple[int, ...]]:
        """Checkpoint name -> shape of every tensor this module and its children load."""
        out = {prefix + n: s for w in self.declare() for n, s in zip(w.names, w.shapes, strict=True)}
        for child_prefix, child in self.children().items():
            out |= child.weight_shapes(prefix + child_prefix)
        return out

    def load(self, get: Callable[[str], Any], upload: Callable[[Any], Array], prefix: str = "") -> None:
        """Fill every declared attribute from `get(name)` (checkpoint tensors), then load the children."""
        for w in self.declare():
            names = [prefix + n for n in w.names]
            value = load_tensor(get, names[0], upload) if len(names) == 1 else load_fused(get, names, upload)
            setattr(self, w.attr, value)
        for child_prefix, child in self.children().items():
            child.load(get, upload, prefix + child_prefix)
