"""Falcon-Mamba: tests/tiny_zoo/mamba.py's layout with Falcon-Mamba's weightless RMSNorm of dt, B and C inside
each mixer, and an untied LM head."""

from __future__ import annotations

import numpy as np

from tests.tiny_zoo import mamba

CONFIG = mamba.CONFIG | dict(
    architectures=["FalconMambaForCausalLM"],
    model_type="falcon_mamba",
    mixer_rms_eps=1e-6,
    tie_word_embeddings=False,
)
SEED = 16001


def weights(cfg: dict, draw) -> dict[str, np.ndarray]:
    w = mamba.weights(cfg, draw)
    w["lm_head.weight"] = draw.linear(cfg["vocab_size"], cfg["hidden_size"], 4.0)
    return w
