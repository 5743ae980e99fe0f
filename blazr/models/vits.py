"""VITS (Kim et al. 2021) text-to-speech, as Piper voices and MMS-TTS use it: phoneme ids -> waveform.

text encoder (vits_text) -> duration predictor (vits_duration: stochastic, or a deterministic one) -> each
phoneme's prior statistics repeated for its frames, sampled -> reversed normalising flow (vits_flow) ->
HiFi-GAN decoder (hifigan). Multi-speaker models condition the last three on a speaker embedding.
Weights use the names of Piper's VITS training code (`enc_p`, `dp`, `flow`, `dec`, `emb_g`), which Piper's
ONNX exports keep (blazr.loaders.piper) and Hugging Face VitsModel checkpoints are renamed to
(blazr.loaders.vits_hf); config keys follow transformers' VitsConfig.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.errors import InputError, UnsupportedError
from blazr.models.base import BaseModelArgs, check_weights, weight_uploader
from blazr.models.hifigan import Generator, fold_stage_mean
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.vits_duration import DurationPredictor, StochasticDurationPredictor
from blazr.models.vits_flow import Coupling, fold_flips
from blazr.models.vits_text import TextEncoder


def task(config: dict[str, Any]) -> str:
    return "speak"


@dataclass
class ModelArgs(BaseModelArgs):
    vocab_size: int = 256
    hidden_size: int = 192  # text encoder width, also the flow's hidden width
    flow_size: int = 192  # latent channels (VITS's inter_channels)
    num_hidden_layers: int = 6
    num_attention_heads: int = 2
    window_size: int = 4
    ffn_dim: int = 768
    ffn_kernel_size: int = 3
    duration_predictor_kernel_size: int = 3
    duration_predictor_num_flows: int = 4
    prior_encoder_num_flows: int = 4
    prior_encoder_num_wavenet_layers: int = 4
    wavenet_kernel_size: int = 5
    wavenet_dilation_rate: int = 1
    upsample_initial_channel: int = 512
    upsample_rates: list[int] = field(default_factory=lambda: [8, 8, 2, 2])
    upsample_kernel_sizes: list[int] = field(default_factory=lambda: [16, 16, 4, 4])
    resblock: str = "1"
    resblock_kernel_sizes: list[int] = field(default_factory=lambda: [3, 7, 11])
    resblock_dilation_sizes: list[list[int]] = field(default_factory=lambda: [[1, 3, 5]] * 3)
    sampling_rate: int = 22050
    # transformers' VitsConfig options (MMS-TTS checkpoints, blazr.loaders.vits_hf); Piper voices keep defaults
    use_stochastic_duration_prediction: bool = True
    duration_predictor_filter_channels: int = 256  # the deterministic predictor's width
    depth_separable_num_layers: int = 3
    duration_predictor_flow_bins: int = 10
    duration_predictor_tail_bound: float = 5.0
    leaky_relu_slope: float = 0.1
    layer_norm_eps: float = 1e-5
    num_speakers: int = 1
    speaker_embedding_size: int = 0  # > 0: speaker embeddings condition the duration predictor, flow, decoder

    @property
    def hidden_channels(self) -> int:
        return self.hidden_size

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsample_rates)

    def __post_init__(self):
        if self.resblock not in ("1", "2"):
            raise UnsupportedError(f"HiFi-GAN resblock kind {self.resblock!r} is not supported (1 or 2)")
        if self.ffn_kernel_size % 2 == 0:
            raise UnsupportedError(f"an even ffn_kernel_size ({self.ffn_kernel_size}) is not supported")
        if self.speaker_embedding_size and self.num_speakers < 2:
            raise UnsupportedError("speaker_embedding_size is set but num_speakers < 2")


class Model(Module):
    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        self.args, self.be, self.dtype = args, backend, dtype or "f32"
        a = args
        self.enc_p = TextEncoder(backend, a)
        stochastic = a.use_stochastic_duration_prediction
        self.dp = (StochasticDurationPredictor if stochastic else DurationPredictor)(backend, a)
        self.flows = [Coupling(backend, a) for _ in range(a.prior_encoder_num_flows)]
        self.dec = Generator(backend, a)
        self.emb_scale = self.emb_g = None  # (1,), (speakers, E) when multi-speaker
        self.last_log_durations: np.ndarray | None = None  # (T,) of the latest synthesize, for inspection

    def declare(self) -> Iterator[Weight]:
        if self.args.speaker_embedding_size:
            yield weight("emb_g", "emb_g.weight", (self.args.num_speakers, self.args.speaker_embedding_size))

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"enc_p.": self.enc_p, "dp.": self.dp, "dec.": self.dec}
        return out | {f"flow.flows.{2 * i}.": f for i, f in enumerate(self.flows)}

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        return [(op, self.dtype, None) for op in sorted(self.ops())]

    def sanitize(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Training-code layouts -> the ones the layers declare: 1x1 convolutions the text encoder runs as
        matmuls lose their kernel axis, the shared relative embeddings (1, 2W+1, Dh) lose their head axis,
        LayerNorm gamma/beta become weight/bias, the flow's flips fold into its couplings and the decoder's
        stage means into the convolutions after them."""
        out: dict[str, np.ndarray] = {}
        for name, w in weights.items():
            w = np.asarray(w, dtype=np.float32)
            if name.startswith("enc_p.") and w.ndim == 3 and w.shape[-1] == 1 and ".ffn_layers." not in name:
                w = w[..., 0]  # conv_q/k/v/o and proj: (N, K, 1) -> (N, K)
            elif name.endswith(("emb_rel_k", "emb_rel_v")):
                w = w.reshape(w.shape[-2], w.shape[-1])
            name = name.removesuffix(".gamma") + ".weight" if name.endswith(".gamma") else name
            name = name.removesuffix(".beta") + ".bias" if name.endswith(".beta") else name
            out[name] = w
        a = self.args
        try:
            out |= fold_flips(out, "flow.flows.", a.prior_encoder_num_flows)
            out |= fold_stage_mean(out, "dec.", len(a.upsample_rates), len(a.resblock_kernel_sizes))
        except (KeyError, ValueError):
            pass  # the strict load check names what is missing or misshapen
        return out

    def load_weights(self, weights: dict[str, Any], source=None) -> None:
        check_weights(weights, self.weight_shapes(), source)
        self.load(weights.__getitem__, weight_uploader(self.be, self.dtype))
        scale = np.array([math.sqrt(self.args.hidden_size)], dtype=np.float32)
        self.emb_scale = self.be.upload(scale)  # (1,)

    # ---- running -----------------------------------------------------------------------------------------

    def synthesize(
        self,
        ids: np.ndarray,
        noise_scale: float,
        length_scale: float,
        noise_w: float,
        rng: np.random.Generator,
        speaker: int | None = None,
    ) -> np.ndarray:
        """Phoneme ids (T,) -> waveform (N,) float32 in [-1, 1] at args.sampling_rate. noise_scale scales the
        prior's sampling noise, noise_w the duration predictor's, length_scale the durations (1 / speed).
        speaker: a multi-speaker model's speaker (None: unconditioned, as transformers runs without one)."""
        with self.be.kernels_own_threads():
            return self._synthesize(ids, noise_scale, length_scale, noise_w, rng, speaker)

    def _synthesize(self, ids, noise_scale, length_scale, noise_w, rng, speaker) -> np.ndarray:
        be, a = self.be, self.args
        x, stats = self.enc_p(be.upload(np.asarray(ids, dtype=np.int32)), self.emb_scale)  # (T, C), (T, 2I)
        t = len(ids)
        g = None
        if speaker is not None and self.emb_g is not None:
            if not 0 <= speaker < a.num_speakers:
                raise InputError(f"speaker {speaker} is out of range (this model has {a.num_speakers})")
            g = be.transpose(be.embed(self.emb_g, be.upload(np.array([speaker], dtype=np.int32))))  # (E, 1)
        dp_noise = rng.standard_normal((2, t)).astype(np.float32) * np.float32(noise_w)
        logw = self.dp(be.transpose(x), dp_noise, g)  # (T,)
        self.last_log_durations = logw
        frames = np.ceil(np.exp(logw) * np.float32(length_scale)).astype(np.int64)  # (T,)
        frame_ids = np.repeat(np.arange(t, dtype=np.int32), frames)  # (F,) phoneme of each frame
        if len(frame_ids) == 0:
            return np.zeros(0, dtype=np.float32)
        prior = be.transpose(be.embed(stats, be.upload(frame_ids)))  # (2I, F): means, then log-scales
        i, f = a.flow_size, len(frame_ids)
        z = prior[:i]  # (I, F)
        if noise_scale:
            noise = rng.standard_normal((i, f)).astype(np.float32) * np.float32(noise_scale)
            z = be.binary("add", z, be.binary("mul", be.act(prior[i:], "exp"), be.upload(noise)))
        for coupling in reversed(self.flows):
            z = coupling.reverse(z, g)
        return be.download(self.dec(z, g))[0].astype(np.float32)  # (F * hop,)
