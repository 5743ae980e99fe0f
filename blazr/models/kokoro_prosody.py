"""Kokoro's text encoder (embedding, CNN, BiLSTM: the acoustic features each phoneme stands for) and prosody
predictor (a style-conditioned duration encoder, then the frames per phoneme, and F0 and energy curves).

Kokoro runs one unpadded sequence, so the training code's masks and packed sequences drop out. The style
s (1, S) that the training code concatenates to the features is never stored: each LSTM that reads it takes
it as its constant `w_style` part (kokoro_blocks.BiLSTM), so features stay (T, H).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from blazr.models.base import Array
from blazr.models.kokoro_blocks import AdainResBlk1d, AdaLayerNorm, BiLSTM, Linear
from blazr.models.layers.conv import ChannelLayerNorm, Conv1d
from blazr.models.layers.module import Module, Weight, weight


class TextEncoder(Module):
    OPS = ("embed", "transpose")

    def __init__(self, be, channels: int, kernel: int, depth: int, symbols: int):
        self.be, self.c, self.symbols = be, channels, symbols
        self.convs = [Conv1d(be, channels, channels, kernel, pad=(kernel - 1) // 2) for _ in range(depth)]
        self.norms = [ChannelLayerNorm(be, channels) for _ in range(depth)]
        self.lstm = BiLSTM(be, channels, channels // 2)
        self.embedding = None  # (symbols, C)

    def declare(self) -> Iterator[Weight]:
        yield weight("embedding", "embedding.weight", (self.symbols, self.c))

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {f"cnn.{i}.0.": c for i, c in enumerate(self.convs)}
        return out | {f"cnn.{i}.1.": n for i, n in enumerate(self.norms)} | {"lstm.": self.lstm}

    def __call__(self, ids: Array) -> Array:
        """ids (T,) int32 -> (C, T)."""
        be = self.be
        x = be.transpose(be.embed(self.embedding, ids))  # (C, T)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = be.act(norm(conv(x)), "leaky_relu", slope=0.2)
        return be.transpose(self.lstm(be.transpose(x)))  # (C, T)


class ProsodyPredictor(Module):
    OPS = ("act", "transpose", "embed")

    def __init__(self, be, style: int, hidden: int, layers: int, max_dur: int):
        self.be, self.h, self.max_dur = be, hidden, max_dur
        self.enc_lstms = [BiLSTM(be, hidden, hidden // 2, style) for _ in range(layers)]
        self.enc_norms = [AdaLayerNorm(be, style, hidden) for _ in range(layers)]
        self.lstm = BiLSTM(be, hidden, hidden // 2, style)
        self.duration_proj = Linear(be, hidden, max_dur)
        self.shared = BiLSTM(be, hidden, hidden // 2, style)
        half = hidden // 2
        self.f0 = [
            AdainResBlk1d(be, hidden, hidden, style),
            AdainResBlk1d(be, hidden, half, style, upsample=True),
            AdainResBlk1d(be, half, half, style),
        ]
        self.n = [
            AdainResBlk1d(be, hidden, hidden, style),
            AdainResBlk1d(be, hidden, half, style, upsample=True),
            AdainResBlk1d(be, half, half, style),
        ]
        self.f0_proj, self.n_proj = Conv1d(be, half, 1, 1), Conv1d(be, half, 1, 1)

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {}
        for i, (lstm, norm) in enumerate(zip(self.enc_lstms, self.enc_norms, strict=True)):
            out |= {f"text_encoder.lstms.{2 * i}.": lstm, f"text_encoder.lstms.{2 * i + 1}.": norm}
        out |= {"lstm.": self.lstm, "duration_proj.linear_layer.": self.duration_proj, "shared.": self.shared}
        out |= {f"F0.{i}.": b for i, b in enumerate(self.f0)} | {f"N.{i}.": b for i, b in enumerate(self.n)}
        return out | {"F0_proj.": self.f0_proj, "N_proj.": self.n_proj}

    def encode(self, d_en: Array, s: Array) -> Array:
        """The duration encoder: d_en (T, H) (the PL-BERT features, projected), s (1, S) -> d (T, H)."""
        x = d_en
        for lstm, norm in zip(self.enc_lstms, self.enc_norms, strict=True):
            x = norm(lstm(x, s), s)  # (T, H)
        return x

    def durations(self, d: Array, s: Array, speed: float) -> np.ndarray:
        """d (T, H) -> frames per phoneme (T,) int64: round(sum sigmoid(logits) / speed), at least 1."""
        logits = self.duration_proj(self.lstm(d, s))  # (T, max_dur)
        total = self.be.download(self.be.act(logits, "sigmoid")).astype(np.float32).sum(axis=1)  # (T,)
        return np.maximum(np.round(total / np.float32(speed)), 1).astype(np.int64)

    def f0_energy(self, en: Array, s: Array) -> tuple[Array, Array]:
        """en (F, H), the encoder's features repeated per frame -> F0 (1, 2F), energy (1, 2F)."""
        x = self.be.transpose(self.shared(en, s))  # (H, F)
        f0, n = x, x
        for block in self.f0:
            f0 = block(f0, s)
        for block in self.n:
            n = block(n, s)
        return self.f0_proj(f0), self.n_proj(n)  # (1, 2F) each
