"""Kokoro-82M (hexgrad): StyleTTS2's inference path with an iSTFTNet decoder, from phoneme ids and a voice
style to a 24 kHz waveform.

    ids -> PL-BERT (ALBERT) -> bert_encoder -> prosody predictor (style s[128:]) -> durations
        -> features repeated per frame -> F0, energy;  text encoder -> repeated per frame
        -> decoder + iSTFTNet generator (style s[:128]) -> waveform

Weights are KModel's state dict (`bert.`, `bert_encoder.`, `predictor.`, `text_encoder.`, `decoder.`);
`sanitize` folds what training keeps apart (weight norm, the style columns of LSTM inputs, AdaIN's affine
pair, LSTM directions) into the layouts the layers declare. The loader is blazr/loaders/kokoro.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.errors import InputError
from blazr.models.base import Array, check_weights, weight_uploader
from blazr.models.kokoro_albert import Albert
from blazr.models.kokoro_blocks import Linear
from blazr.models.kokoro_decoder import Decoder
from blazr.models.kokoro_fold import fold_adain, fold_lstm, generated
from blazr.models.kokoro_prosody import ProsodyPredictor, TextEncoder
from blazr.models.layers.module import Module

SAMPLE_RATE = 24000
_SOURCE = "decoder.generator.m_source.l_linear."


@dataclass
class KokoroArgs:
    n_token: int
    hidden_dim: int
    style_dim: int
    n_layer: int
    max_dur: int
    text_encoder_kernel_size: int
    plbert: dict[str, Any]
    istftnet: dict[str, Any]
    vocab: dict[str, int] = field(default_factory=dict)
    widths: dict[str, int] = field(
        default_factory=lambda: {"hidden": 1024, "to_generator": 512, "asr_res": 64}
    )

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> KokoroArgs:
        keys = cls.__dataclass_fields__
        return cls(**{k: v for k, v in config.items() if k in keys})


class Model(Module):
    def __init__(self, args: KokoroArgs, backend):
        a, be = args, backend
        self.args, self.be = a, be
        self.bert = Albert(be, a.n_token, a.plbert)
        self.bert_encoder = Linear(be, int(a.plbert["hidden_size"]), a.hidden_dim)
        self.predictor = ProsodyPredictor(be, a.style_dim, a.hidden_dim, a.n_layer, a.max_dur)
        self.text_encoder = TextEncoder(be, a.hidden_dim, a.text_encoder_kernel_size, a.n_layer, a.n_token)
        self.decoder = Decoder(be, a.hidden_dim, a.style_dim, a.widths, a.istftnet)
        self.last_durations: np.ndarray | None = None  # (T,) frames per phoneme of the latest synthesize

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"bert.": self.bert, "bert_encoder.": self.bert_encoder}
        return out | {
            "predictor.": self.predictor,
            "text_encoder.": self.text_encoder,
            "decoder.": self.decoder,
        }

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        return [(op, "f32", None) for op in sorted(self.ops())]

    def load_weights(self, weights: dict[str, np.ndarray], source=None) -> None:
        weights = dict(weights)
        gen = self.decoder.generator
        gen.source_w, gen.source_b = weights.pop(_SOURCE + "weight"), weights.pop(_SOURCE + "bias")
        check_weights(weights, self.weight_shapes(), source)
        self.load(weights.__getitem__, weight_uploader(self.be, "f32"))

    # ---- running -----------------------------------------------------------------------------------------

    def synthesize(
        self,
        ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float = 1.0,
        noise: bool = False,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Phoneme ids (T,) with Kokoro's 0 at both ends, ref_s (1, 2S) (a voice pack's row: the decoder's
        style, then the predictor's) -> waveform (N,) float32 at 24 kHz. noise: the harmonic source's random
        overtone phases and noise (kokoro_source.py); False is deterministic."""
        if noise and rng is None:
            rng = np.random.default_rng()
        with self.be.kernels_own_threads():
            s_dec, asr, f0, energy = self.prosody(ids, ref_s, speed)
            return self.be.download(self.decoder(asr, f0, energy, s_dec, noise, rng)).astype(np.float32)

    def prosody(self, ids: np.ndarray, ref_s: np.ndarray, speed: float = 1.0) -> tuple[Array, ...]:
        """Everything before the decoder: the decoder's style s (1, S), the text features per frame asr (H, F),
        F0 and energy (1, 2F) each; the durations go to last_durations."""
        be, a = self.be, self.args
        ids = np.asarray(ids, dtype=np.int32)
        if len(ids) > self.bert.positions:
            raise InputError(f"{len(ids)} phoneme ids exceed Kokoro's context of {self.bert.positions}")
        ref_s = np.asarray(ref_s, dtype=np.float32).reshape(1, -1)
        s_dec, s_pro = be.upload(ref_s[:, : a.style_dim]), be.upload(ref_s[:, a.style_dim :])  # (1, S) each
        d_en = self.bert_encoder(self.bert(ids))  # (T, H)
        d = self.predictor.encode(d_en, s_pro)  # (T, H)
        frames = self.predictor.durations(d, s_pro, speed)  # (T,)
        self.last_durations = frames
        frame_ids = be.upload(np.repeat(np.arange(len(ids), dtype=np.int32), frames))  # (F,)
        f0, energy = self.predictor.f0_energy(be.embed(d, frame_ids), s_pro)  # (1, 2F) each
        t_en = self.text_encoder(be.upload(ids))  # (H, T)
        asr = be.transpose(be.embed(be.transpose(t_en), frame_ids))  # (H, F)
        return s_dec, asr, f0, energy


# ---- checkpoint layout -------------------------------------------------------------------------------------

_LSTM = re.compile(r"(.*)\.weight_ih_l0$")


def sanitize(weights: dict[str, np.ndarray], args: KokoroArgs) -> dict[str, np.ndarray]:
    """KModel's tensors (weight norm already folded, `module.` prefixes gone) -> the layers' layout."""
    out = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items() if not k.endswith("position_ids")}
    out = {k: v for k, v in out.items() if not k.startswith("bert.pooler.")}  # unused: last_hidden_state only
    for name in [n for n in out if _LSTM.match(n)]:
        prefix = _LSTM.match(name).group(1)
        out |= fold_lstm(out, prefix, args.hidden_dim, args.style_dim)
    out = fold_adain(out)
    for name in list(out):
        if name.endswith(".gamma") or name.endswith(".beta"):
            out[name.rsplit(".", 1)[0] + (".weight" if name.endswith(".gamma") else ".bias")] = out.pop(name)
    return out | generated(out, args)
