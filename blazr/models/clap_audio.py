"""HTSAT, CLAP's audio tower (transformers' ClapAudioModel, `audio_config` of a ClapModel; fusion off).

log-mel (frames, mels) --batch norm over the mel bins, bicubic stretch of time to spec_size * r frames
(r = spec_size // mels), the r time chunks stacked as rows--> a spec_size x spec_size image --4 x 4 patches,
a linear map each (the stride-4 Conv2d), LayerNorm--> a (spec/4)^2 grid of tokens --Swin stages: pre-norm blocks
of window attention (blazr.models.layers.window_attention; every second block shifted) and a GELU MLP, then a
2x2 patch merge (LayerNorm over 4C, linear to 2C) between stages--> LayerNorm --mean over tokens--> (C,).

HTSAT's final regrouping of the token map before its average pool only reorders tokens, so the pool is the mean
of them all. The input steps up to the image (batch norm, bicubic stretch, patch cutting) are a fixed reshaping
of a (1001, 64) array and run on the host in numpy; everything from the patch projection on runs on the
backend. Fused checkpoints (enable_fusion, the "fusion" feature truncation) are not run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import HF_ACTIVATIONS, Array, BaseModelArgs, host_array, trace
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm
from blazr.models.layers.window_attention import WindowAttention

BATCH_NORM_EPS = 1e-5  # nn.BatchNorm2d's default; HTSAT does not change it
CUBIC_A = -0.75  # PyTorch's bicubic kernel


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


@dataclass
class AudioArgs(BaseModelArgs):
    window_size: int = 8
    num_mel_bins: int = 64
    spec_size: int = 256
    hidden_act: str = "gelu"
    patch_size: int | list[int] = 4
    patch_stride: int | list[int] = field(default_factory=lambda: [4, 4])
    hidden_size: int = 768
    depths: list[int] = field(default_factory=lambda: [2, 2, 6, 2])
    num_attention_heads: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    enable_fusion: bool = False
    patch_embed_input_channels: int = 1
    flatten_patch_embeds: bool = True
    patch_embeds_hidden_size: int = 96
    enable_patch_layer_norm: bool = True
    qkv_bias: bool = True
    mlp_ratio: float = 4.0
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        if self.enable_fusion:
            raise UnsupportedError(
                "CLAP with enable_fusion (a fused HTSAT) is not supported; only unfused runs"
            )
        if _pair(self.patch_size) != _pair(self.patch_stride) or len(set(_pair(self.patch_size))) != 1:
            raise UnsupportedError("HTSAT with overlapping or non-square patches is not supported")
        if self.patch_embed_input_channels != 1 or not self.qkv_bias or not self.enable_patch_layer_norm:
            raise UnsupportedError("this HTSAT variant (channels, qkv_bias, patch norm) is not supported")
        if self.hidden_act not in HF_ACTIVATIONS:
            raise UnsupportedError(f"HTSAT hidden_act {self.hidden_act!r} is not supported")
        if self.spec_size % self.num_mel_bins or self.hidden_size != self.features:
            raise UnsupportedError("HTSAT's spec_size, num_mel_bins and hidden_size do not fit together")

    @property
    def patch(self) -> int:
        return _pair(self.patch_size)[0]

    @property
    def features(self) -> int:
        """Channels after the last stage: patch_embeds_hidden_size doubled by every patch merge."""
        return self.patch_embeds_hidden_size * 2 ** (len(self.depths) - 1)


def bicubic_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in): PyTorch's bicubic interpolation along one axis with align_corners=True."""
    scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    src = scale * np.arange(n_out)
    base = np.floor(src).astype(int)
    t = src - base

    def near(x):  # |x| <= 1
        return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A

    out = np.zeros((n_out, n_in))
    for offset, w in ((-1, far(t + 1)), (0, near(t)), (1, near(1 - t)), (2, far(2 - t))):
        np.add.at(out, (np.arange(n_out), np.clip(base + offset, 0, n_in - 1)), w)
    return out


class BatchNorm(Module):
    """The input batch norm over mel bins, inference form; kept on the host (it runs before the stretch)."""

    def __init__(self, bins: int):
        self.bins = bins
        self.params: dict[str, np.ndarray] = {}

    def declare(self) -> Iterator[Weight]:
        for name in ("weight", "bias", "running_mean", "running_var"):
            yield weight(name, name, (self.bins,))

    def load(self, get, upload, prefix: str = "") -> None:
        self.params = {
            w.attr: host_array(get(prefix + w.names[0])).astype(np.float64) for w in self.declare()
        }

    def __call__(self, mel: np.ndarray) -> np.ndarray:
        p = self.params  # mel (frames, bins)
        return (mel - p["running_mean"]) / np.sqrt(p["running_var"] + BATCH_NORM_EPS) * p["weight"] + p[
            "bias"
        ]


class PatchEmbed(Module):
    """The stride-p Conv2d over non-overlapping p x p patches as one matmul, then its LayerNorm."""

    OPS = ("matmul", "binary")

    def __init__(self, backend, args: AudioArgs):
        self.be, self.channels, self.p = backend, args.patch_embeds_hidden_size, args.patch
        self.norm = LayerNorm(backend, self.channels, 1e-5)  # nn.LayerNorm's default eps, as in HTSAT
        self.proj = self.proj_bias = None  # (C, p * p), (C,)

    def declare(self) -> Iterator[Weight]:
        yield weight("proj", "proj.weight", (self.channels, 1, self.p, self.p))
        yield weight("proj_bias", "proj.bias", (self.channels,))

    def children(self) -> dict[str, Module]:
        return {"norm.": self.norm}

    def load(self, get, upload, prefix: str = "") -> None:
        self.proj = upload(host_array(get(prefix + "proj.weight")).reshape(self.channels, -1))
        self.proj_bias = upload(host_array(get(prefix + "proj.bias")))
        self.norm.load(get, upload, prefix + "norm.")

    def __call__(self, patches: Array) -> Array:
        """patches (T, p * p) -> tokens (T, C)."""
        return self.norm(self.be.binary("add", self.be.matmul(patches, self.proj), self.proj_bias))


class SwinBlock(Module):
    """x + attn(norm(x)), then x + mlp(norm(x)): ClapAudioLayer."""

    OPS = ("binary",)

    def __init__(self, backend, args: AudioArgs, dim: int, heads: int, grid, shift: int, layer: int):
        self.be, self.layer = backend, layer
        eps = args.layer_norm_eps
        self.layernorm_before, self.layernorm_after = (
            LayerNorm(backend, dim, eps),
            LayerNorm(backend, dim, eps),
        )
        self.attention = WindowAttention(backend, dim, heads, grid, args.window_size, shift, layer)
        act = HF_ACTIVATIONS[args.hidden_act]
        names = ("intermediate.dense", "output.dense")
        self.mlp = MLP(backend, dim, int(args.mlp_ratio * dim), act, layer, names=names)

    def children(self) -> dict[str, Module]:
        return {
            "layernorm_before.": self.layernorm_before,
            "attention.": self.attention,
            "layernorm_after.": self.layernorm_after,
            "": self.mlp,
        }

    def __call__(self, x: Array) -> Array:
        be = self.be
        x = be.binary("add", x, self.attention(self.layernorm_before(x)))  # (T, C)
        x = be.binary("add", x, self.mlp(self.layernorm_after(x)))  # (T, C)
        trace("l_out", self.layer, x)
        return x


class PatchMerging(Module):
    """2x2 neighbours side by side (rows (2i, 2j), (2i+1, 2j), (2i, 2j+1), (2i+1, 2j+1)), LayerNorm, 4C -> 2C."""

    OPS = ("embed", "matmul")

    def __init__(self, backend, dim: int, grid: tuple[int, int]):
        height, width = grid
        if height % 2 or width % 2:
            raise UnsupportedError(f"HTSAT patch merging of an odd {height}x{width} grid is not supported")
        self.be, self.dim, self.grid = backend, dim, grid
        self.norm = LayerNorm(backend, 4 * dim, 1e-5)
        self.reduction = self.order = None  # (2C, 4C), (T,) int32

    def declare(self) -> Iterator[Weight]:
        yield weight("reduction", "reduction.weight", (2 * self.dim, 4 * self.dim))

    def children(self) -> dict[str, Module]:
        return {"norm.": self.norm}

    def load(self, get, upload, prefix: str = "") -> None:
        super().load(get, upload, prefix)
        h, w = self.grid
        i, j = np.meshgrid(np.arange(h // 2), np.arange(w // 2), indexing="ij")  # (h/2, w/2)
        quad = [(2 * i + dr) * w + 2 * j + dc for dc in (0, 1) for dr in (0, 1)]  # 4 x (h/2, w/2)
        self.order = self.be.upload(np.stack(quad, axis=-1).reshape(-1).astype(np.int32))  # (T,)

    def __call__(self, x: Array) -> Array:
        """x (T, C) -> (T / 4, 2C)."""
        t = x.shape[0]
        grouped = self.be.embed(x, self.order).reshape(t // 4, 4 * self.dim)  # (T/4, 4C)
        return self.be.matmul(self.norm(grouped), self.reduction)  # (T/4, 2C)


class AudioEncoder(Module):
    """HTSAT from log-mel to the pooled (C,) vector (`audio_model.audio_encoder.` in a ClapModel)."""

    OPS = ("matmul", "transpose")

    def __init__(self, args: AudioArgs, backend):
        self.args, self.be = args, backend
        side = args.spec_size // args.patch
        self.batch_norm = BatchNorm(args.num_mel_bins)
        self.patch_embed = PatchEmbed(backend, args)
        self.blocks: dict[str, Module] = {}
        dim, layer = args.patch_embeds_hidden_size, 0
        for s, (depth, heads) in enumerate(zip(args.depths, args.num_attention_heads, strict=True)):
            grid = (side >> s, side >> s)
            for b in range(depth):
                shift = 0 if b % 2 == 0 else args.window_size // 2
                self.blocks[f"layers.{s}.blocks.{b}."] = SwinBlock(
                    backend, args, dim, heads, grid, shift, layer
                )
                layer += 1
            if s < len(args.depths) - 1:
                self.blocks[f"layers.{s}.downsample."] = PatchMerging(backend, dim, grid)
                dim *= 2
        self.norm = LayerNorm(backend, args.features, args.layer_norm_eps)

    def children(self) -> dict[str, Module]:
        return {
            "batch_norm.": self.batch_norm,
            "patch_embed.": self.patch_embed,
            **self.blocks,
            "norm.": self.norm,
        }

    def patches(self, mel: np.ndarray) -> np.ndarray:
        """log-mel (frames, mels) -> (tokens, p * p) float32: the image's patches, row-major (host side)."""
        a = self.args
        r, width = a.spec_size // a.num_mel_bins, a.spec_size * (a.spec_size // a.num_mel_bins)
        frames, bins = mel.shape
        if frames > width or bins != a.num_mel_bins:
            raise UnsupportedError(
                f"HTSAT input of {frames}x{bins}: at most {width} frames of {a.num_mel_bins} bins"
            )
        x = self.batch_norm(mel.astype(np.float64))  # (frames, mels)
        if frames < width:
            x = bicubic_matrix(frames, width) @ x  # (width, mels)
        image = x.reshape(r, width // r, bins).transpose(0, 2, 1).reshape(a.spec_size, a.spec_size)
        p, n = a.patch, a.spec_size // a.patch
        return image.reshape(n, p, n, p).transpose(0, 2, 1, 3).reshape(n * n, p * p).astype(np.float32)

    def __call__(self, mel: np.ndarray) -> Array:
        """log-mel (frames, mels) of one clip -> pooled (1, C)."""
        be = self.be
        x = self.patch_embed(be.upload(self.patches(mel)))  # (T, C)
        trace("patch_embed", -1, x)
        for block in self.blocks.values():
            x = block(x)
        x = self.norm(x)  # (T', C)
        mean = be.upload(np.full((1, x.shape[0]), 1.0 / x.shape[0], dtype=np.float32))  # (1, T')
        return be.matmul(mean, be.transpose(x))  # (1, C)
