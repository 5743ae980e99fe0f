"""Token embeddings and the LM head: one (V, D) table each (a tied model's head is its embeddings)."""

from __future__ import annotations

from collections.abc import Iterator

from blazr.models.layers.module import Module, Weight, weight


class Embedding(Module):
    """A (V, D) table: the token embeddings, and the LM head (with a bias in Phi-2)."""

    OPS = ("embed",)

    def __init__(self, backend, vocab: int, dim: int, bias: bool = False):
        self.be, self.vocab, self.dim, self.has_bias = backend, vocab, dim, bias
        self.weight = self.bias = None  # (V, D), (V,) or None

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.vocab, self.dim))
        if self.has_bias:
            yield weight("bias", "bias", (self.vocab,))
