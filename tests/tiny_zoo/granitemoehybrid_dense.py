"""Granite-4.0-H-Micro's layout: tests/tiny_zoo/granitemoehybrid.py without experts (num_local_experts 0), so
each layer's MLP is the shared MLP alone. NoPE as the released models (llama.cpp's converter drops RoPE from
a Granite-4.0-H file: it keeps it for Bamba only)."""

from __future__ import annotations

from tests.tiny_zoo import granitemoehybrid

CONFIG = granitemoehybrid.CONFIG | dict(
    num_local_experts=0,
    num_experts_per_tok=0,
)
SEED = 14011
weights = granitemoehybrid.weights
as_transformers = granitemoehybrid.as_transformers
