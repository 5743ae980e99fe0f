"""Kokoro's decoder: style-conditioned residual blocks over the aligned text features, F0 and energy, then
iSTFTNet's generator: transposed-conv upsampling with AdaIN/Snake residual blocks, a harmonic source fed in
through its STFT at every stage, and the waveform from predicted log-magnitudes and phases by an iSTFT.

Widths come from the weights: Kokoro-82M's are 1024 (hidden), 512 (into the generator), 64 (ASR residual).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from blazr.models.base import Array
from blazr.models.kokoro_blocks import AdainResBlk1d, AdaINResBlock1
from blazr.models.kokoro_source import harmonic_source
from blazr.models.layers.conv import Conv1d, ConvTranspose1d
from blazr.models.layers.module import Module, Weight, weight


class Generator(Module):
    OPS = ("stft", "istft", "concat", "act", "binary", "transpose")

    def __init__(self, be, style: int, c0: int, ist: dict):
        self.be = be
        rates, kernels = list(ist["upsample_rates"]), list(ist["upsample_kernel_sizes"])
        self.n_fft, self.hop = int(ist["gen_istft_n_fft"]), int(ist["gen_istft_hop_size"])
        self.upsample = math.prod(rates) * self.hop  # audio samples per F0 step
        self.n_kernels = len(ist["resblock_kernel_sizes"])
        self.ups, self.resblocks, self.noise_convs, self.noise_res = [], [], [], []
        for i, (u, k) in enumerate(zip(rates, kernels, strict=True)):
            c_in, c = c0 // 2**i, c0 // 2 ** (i + 1)
            self.ups.append(ConvTranspose1d(be, c_in, c, k, u, (k - u) // 2))
            for k_res, dil in zip(ist["resblock_kernel_sizes"], ist["resblock_dilation_sizes"], strict=True):
                self.resblocks.append(AdaINResBlock1(be, c, k_res, list(dil), style))
            if i + 1 < len(rates):
                stride = math.prod(rates[i + 1 :])
                conv = Conv1d(be, self.n_fft + 2, c, 2 * stride, stride=stride, pad=(stride + 1) // 2)
                self.noise_res.append(AdaINResBlock1(be, c, 7, [1, 3, 5], style))
            else:
                conv = Conv1d(be, self.n_fft + 2, c, 1)
                self.noise_res.append(AdaINResBlock1(be, c, 11, [1, 3, 5], style))
            self.noise_convs.append(conv)
        self.conv_post = Conv1d(be, c, self.n_fft + 2, 7, pad=3)
        self.source_w = self.source_b = None  # host (1, 9), (1,): the harmonic merge (m_source.l_linear)
        self.window = None  # (N,) periodic Hann (made at load)

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {f"ups.{i}.": m for i, m in enumerate(self.ups)}
        out |= {f"resblocks.{i}.": m for i, m in enumerate(self.resblocks)}
        out |= {f"noise_convs.{i}.": m for i, m in enumerate(self.noise_convs)}
        return (
            out
            | {f"noise_res.{i}.": m for i, m in enumerate(self.noise_res)}
            | {"conv_post.": self.conv_post}
        )

    def declare(self) -> Iterator[Weight]:
        yield weight("window", "window", (self.n_fft,))

    def __call__(self, x: Array, s: Array, f0: np.ndarray, noise: bool, rng) -> Array:
        """x (C0, 2F), s (1, S), f0 (2F,) host -> waveform (2F * upsample,)."""
        return self.from_source(x, s, self.source_spectrum(f0, noise, rng))

    def source_spectrum(self, f0: np.ndarray, noise: bool, rng) -> Array:
        """The harmonic source's STFT as features: f0 (2F,) host -> [magnitude; phase] (2K, Fs). The phase of
        a bin of near-zero magnitude is decided by rounding, in PyTorch as here (tests/test_kokoro_model.py)."""
        be = self.be
        source = harmonic_source(f0, self.upsample, self.source_w, self.source_b, noise, rng)  # (L,)
        mag, phase = be.stft(be.upload(source), self.window, self.hop)  # (K, Fs) each
        return be.concat(mag, phase)  # (2K, Fs)

    def from_source(self, x: Array, s: Array, har: Array) -> Array:
        """x (C0, 2F), s (1, S), har (2K, Fs) (source_spectrum) -> waveform ((Fs - 1) * hop,)."""
        be, bins = self.be, self.n_fft // 2 + 1
        last = len(self.ups) - 1
        for i, up in enumerate(self.ups):
            x_source = self.noise_res[i](self.noise_convs[i](har), s)  # (C, L_i)
            x = up(be.act(x, "leaky_relu", slope=0.1))  # (C, L_i or L_i - 1)
            if i == last:  # ReflectionPad1d((1, 0)): column 1 again in front
                xt = be.transpose(x)  # (L, C)
                x = be.transpose(be.concat(xt[1:2], xt))  # (C, L + 1)
            x = be.binary("add", x, x_source)
            xs = None
            for j in range(self.n_kernels):
                y = self.resblocks[i * self.n_kernels + j](x, s)
                xs = y if xs is None else be.binary("add", xs, y)
            x = be.binary("mul", xs, 1.0 / self.n_kernels)
        x = self.conv_post(x, pre_act="leaky_relu", slope=0.01)  # (2K, Fs)
        return be.istft(be.act(x[:bins], "exp"), be.act(x[bins:], "sin"), self.window, self.hop)


class Decoder(Module):
    OPS = ("concat",)

    def __init__(self, be, dim_in: int, style: int, widths: dict[str, int], ist: dict):
        self.be = be
        hid, out, res = widths["hidden"], widths["to_generator"], widths["asr_res"]
        self.encode = AdainResBlk1d(be, dim_in + 2, hid, style)
        self.decode = [AdainResBlk1d(be, hid + 2 + res, hid, style) for _ in range(3)]
        self.decode.append(AdainResBlk1d(be, hid + 2 + res, out, style, upsample=True))
        self.f0_conv = Conv1d(be, 1, 1, 3, stride=2, pad=1)
        self.n_conv = Conv1d(be, 1, 1, 3, stride=2, pad=1)
        self.asr_res = Conv1d(be, dim_in, res, 1)
        self.generator = Generator(be, style, out, ist)

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"encode.": self.encode} | {
            f"decode.{i}.": b for i, b in enumerate(self.decode)
        }
        out |= {"F0_conv.": self.f0_conv, "N_conv.": self.n_conv, "asr_res.0.": self.asr_res}
        return out | {"generator.": self.generator}

    def __call__(self, asr: Array, f0: Array, energy: Array, s: Array, noise: bool, rng) -> Array:
        """asr (C, F), f0 / energy (1, 2F), s (1, S) -> waveform (2F * upsample,)."""
        x = self.hidden(asr, f0, energy, s)  # (C0, 2F)
        return self.generator(x, s, self.be.download(f0)[0], noise, rng)

    def hidden(self, asr: Array, f0: Array, energy: Array, s: Array) -> Array:
        """The generator's input: asr (C, F), f0 / energy (1, 2F), s (1, S) -> (C0, 2F)."""
        be = self.be
        f0_down, n_down = self.f0_conv(f0), self.n_conv(energy)  # (1, F) each
        prosody = be.concat(f0_down, n_down)  # (2, F)
        x = self.encode(be.concat(asr, prosody), s)  # (hid, F)
        asr_res = self.asr_res(asr)  # (res, F)
        for block in self.decode:  # every block reads the residual features; only the last upsamples
            x = block(be.concat(be.concat(x, asr_res), prosody), s)
        return x
