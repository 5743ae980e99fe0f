"""Whisper (HF WhisperForConditionalGeneration, model_type whisper): OpenAI's speech recognition model.

Encoder: log-mel (n_mels, 3000) -> conv1d (k3) -> GELU -> conv1d (k3, stride 2) -> GELU -> (1500, D) plus a
fixed sinusoidal position table, then pre-norm blocks (self-attention, GELU MLP) and a final LayerNorm.
Decoder: token + learned position embeddings, pre-norm blocks of causal self-attention (paged KV cache),
cross-attention over the window's encoder output and a GELU MLP, a final LayerNorm, and logits from the tied
token embeddings. Weights use transformers' names; CTranslate2 and whisper.cpp files are renamed to them
(blazr.loaders.whisper_formats). The decoding loop is blazr.tasks.transcribe's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from blazr.errors import UnsupportedError
from blazr.models.base import Array, BaseModelArgs, check_weights, trace, weight_uploader
from blazr.models.layers.cross_attention import CachedSelfAttention, CrossAttention
from blazr.models.layers.dense_attention import DenseSelfAttention
from blazr.models.layers.mlp import MLP
from blazr.models.layers.module import Module, Weight, weight
from blazr.models.layers.norm import LayerNorm
from blazr.models.whisper_cache import DecodeStep, WhisperCache

EPS = 1e-5  # Whisper's LayerNorm epsilon (PyTorch's default; not in the config)


def task(config: dict[str, Any]) -> str:
    """blazr.models.model_task: speech to text, run by blazr.tasks.transcribe."""
    return "transcribe"


@dataclass
class ModelArgs(BaseModelArgs):
    vocab_size: int = 51865
    num_mel_bins: int = 80
    d_model: int = 384
    encoder_layers: int = 4
    encoder_attention_heads: int = 6
    encoder_ffn_dim: int = 1536
    decoder_layers: int = 4
    decoder_attention_heads: int = 6
    decoder_ffn_dim: int = 1536
    max_source_positions: int = 1500
    max_target_positions: int = 448
    activation_function: str = "gelu"
    scale_embedding: bool = False

    def __post_init__(self):
        if self.activation_function != "gelu":
            raise UnsupportedError(
                f"Whisper activation_function {self.activation_function!r} is not supported"
            )
        if self.scale_embedding:
            raise UnsupportedError("Whisper with scale_embedding=true is not supported")


def _packs(name: str, w: Any) -> bool:
    return (
        name.endswith(("proj.weight", "fc1.weight", "fc2.weight", "embed_tokens.weight"))
        and w.shape[1] % 32 == 0
    )


class PackedTensor:
    """A float matrix quantized at load, in the form the weight uploader keeps packed."""

    quantized = True

    def __init__(self, blocks: np.ndarray, fmt: str, shape: tuple[int, int]):
        self.blocks, self.dtype, self.shape = blocks, fmt, shape

    def load_blocks(self) -> np.ndarray:
        return self.blocks

    def release(self) -> None:
        """Nothing mapped to let go of (the loader's hook for file-backed tensors)."""


def _packed(w: Any, fmt: str) -> PackedTensor:
    import gguf

    dense = np.asarray(w, dtype=np.float32)  # (N, K)
    blocks = gguf.quants.quantize(dense, gguf.GGMLQuantizationType[fmt])  # (N, row bytes) uint8
    return PackedTensor(blocks, fmt, dense.shape)


class Conv1d(Module):
    OPS = ("conv1d",)

    def __init__(self, backend, c_in: int, c_out: int, stride: int):
        self.be, self.c_in, self.c_out, self.stride = backend, c_in, c_out, stride
        self.weight = self.bias = None  # (C_out, C_in, 3), (C_out,)

    def declare(self) -> Iterator[Weight]:
        yield weight("weight", "weight", (self.c_out, self.c_in, 3))
        yield weight("bias", "bias", (self.c_out,))

    def __call__(self, x: Array) -> Array:
        return self.be.conv1d(x, self.weight, self.bias, self.stride, 1, 1)  # (C_out, L_out)


class EncoderBlock(Module):
    """x += attn(norm(x)); x += mlp(norm(x))."""

    OPS = ("binary",)

    def __init__(self, be, a: ModelArgs, layer: int):
        d = a.d_model
        self.be, self.layer = be, layer
        names = ("q_proj", "k_proj", "v_proj", "out_proj")
        self.self_attn = DenseSelfAttention(be, d, a.encoder_attention_heads, layer, names)
        self.self_attn_layer_norm, self.final_layer_norm = LayerNorm(be, d, EPS), LayerNorm(be, d, EPS)
        self.mlp = MLP(be, d, a.encoder_ffn_dim, "gelu", layer, names=("fc1", "fc2"))

    def children(self) -> dict[str, Module]:
        return {
            "self_attn.": self.self_attn,
            "self_attn_layer_norm.": self.self_attn_layer_norm,
            "final_layer_norm.": self.final_layer_norm,
            "": self.mlp,
        }

    def __call__(self, x: Array, seq_lens: Array) -> Array:
        be = self.be
        x = be.binary("add", x, self.self_attn(self.self_attn_layer_norm(x), seq_lens))  # (T, D)
        x = be.binary("add", x, self.mlp(self.final_layer_norm(x)))  # (T, D)
        trace("enc_out", self.layer, x)
        return x


class DecoderBlock(Module):
    """x += self_attn(norm(x)); x += cross_attn(norm(x)); x += mlp(norm(x))."""

    OPS = ("binary",)

    def __init__(self, be, a: ModelArgs, layer: int):
        d, heads = a.d_model, a.decoder_attention_heads
        self.be, self.layer = be, layer
        self.self_attn = CachedSelfAttention(be, d, heads, layer)
        self.encoder_attn = CrossAttention(be, d, heads, layer)
        self.norms = [LayerNorm(be, d, EPS) for _ in range(3)]  # self, cross, MLP
        self.mlp = MLP(be, d, a.decoder_ffn_dim, "gelu", layer, names=("fc1", "fc2"))

    def children(self) -> dict[str, Module]:
        norm_names = ("self_attn_layer_norm.", "encoder_attn_layer_norm.", "final_layer_norm.")
        out: dict[str, Module] = {
            "self_attn.": self.self_attn,
            "encoder_attn.": self.encoder_attn,
            "": self.mlp,
        }
        return out | dict(zip(norm_names, self.norms, strict=True))

    def __call__(self, x: Array, cache: WhisperCache, step: DecodeStep) -> Array:
        be = self.be
        x = be.binary("add", x, self.self_attn(self.norms[0](x), cache, step))  # (T, D)
        x = be.binary("add", x, self.encoder_attn(self.norms[1](x), cache, step))  # (T, D)
        x = be.binary("add", x, self.mlp(self.norms[2](x)))  # (T, D)
        trace("dec_out", self.layer, x)
        return x


class Encoder(Module):
    OPS = ("act", "transpose", "binary")

    def __init__(self, be, a: ModelArgs):
        self.be, self.args = be, a
        d = a.d_model
        self.conv1, self.conv2 = Conv1d(be, a.num_mel_bins, d, 1), Conv1d(be, d, d, 2)
        self.layers = [EncoderBlock(be, a, i) for i in range(a.encoder_layers)]
        self.layer_norm = LayerNorm(be, d, EPS)
        self.positions = None  # (P, D)

    def declare(self) -> Iterator[Weight]:
        yield weight(
            "positions", "embed_positions.weight", (self.args.max_source_positions, self.args.d_model)
        )

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"conv1.": self.conv1, "conv2.": self.conv2, "layer_norm.": self.layer_norm}
        return out | {f"layers.{i}.": layer for i, layer in enumerate(self.layers)}

    def __call__(self, mel: Array) -> Array:
        """mel (n_mels, 2P) of one window -> (P, D)."""
        be = self.be
        x = be.act(self.conv2(be.act(self.conv1(mel), "gelu")), "gelu")  # (D, P)
        x = be.binary("add", be.transpose(x), self.positions)  # (P, D)
        lens = be.upload(np.array([x.shape[0]], dtype=np.int32))  # (1,)
        for layer in self.layers:
            x = layer(x, lens)
        return self.layer_norm(x)  # (P, D)


class Decoder(Module):
    OPS = ("embed", "binary", "matmul")

    def __init__(self, be, a: ModelArgs):
        self.be, self.args = be, a
        self.layers = [DecoderBlock(be, a, i) for i in range(a.decoder_layers)]
        self.layer_norm = LayerNorm(be, a.d_model, EPS)
        self.tokens = self.positions = None  # (V, D), (448, D)

    def declare(self) -> Iterator[Weight]:
        a = self.args
        yield weight("tokens", "embed_tokens.weight", (a.vocab_size, a.d_model))
        yield weight("positions", "embed_positions.weight", (a.max_target_positions, a.d_model))

    def children(self) -> dict[str, Module]:
        out: dict[str, Module] = {"layer_norm.": self.layer_norm}
        return out | {f"layers.{i}.": layer for i, layer in enumerate(self.layers)}

    def __call__(self, ids: Array, cache: WhisperCache, step: DecodeStep, last: Array | None) -> Array:
        """ids (T,) -> logits of the rows `last` (B,) picks (None: every row): (B or T, V)."""
        be = self.be
        x = be.binary("add", be.embed(self.tokens, ids), be.embed(self.positions, step.positions))  # (T, D)
        for layer in self.layers:
            x = layer(x, cache, step)
        x = x if last is None else be.embed(x, last)  # (B, D)
        return be.matmul(self.layer_norm(x), self.tokens)  # (B, V)


class Model(Module):
    def __init__(self, args: ModelArgs, backend, dtype: str | None = None):
        self.args, self.be, self.dtype = args, backend, dtype or "f32"
        self.encoder, self.decoder = Encoder(backend, args), Decoder(backend, args)

    def children(self) -> dict[str, Module]:
        return {"model.encoder.": self.encoder, "model.decoder.": self.decoder}

    def required_ops(self) -> list[tuple[str, str | None, str | None]]:
        return [(op, self.dtype, None) for op in sorted(self.ops())]

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Zero k_proj biases (Whisper has none) so q/k/v fuse into one matmul; drop a stored tied head."""
        weights = {k: v for k, v in weights.items() if k != "proj_out.weight"}
        for name in list(weights):
            if name.endswith("k_proj.weight") and name[: -len("weight")] + "bias" not in weights:
                weights[name[: -len("weight")] + "bias"] = np.zeros(self.args.d_model, dtype=np.float32)
        return weights

    def load_weights(self, weights: dict[str, Any], source=None, quantize: str | None = None) -> None:
        """Strict load. quantize "Q8_0": every matrix (projections, MLPs, the token embedding that is also
        the output head) packed to Q8_0 blocks at load, for the backend's int8 kernels (faster-whisper's
        int8 compute type); the conv stem, norms, biases and position tables stay float."""
        check_weights(weights, self.weight_shapes(), source)
        if quantize is not None:
            weights = {name: _packed(w, quantize) if _packs(name, w) else w for name, w in weights.items()}
        self.load(weights.__getitem__, weight_uploader(self.be, self.dtype))

    # ---- running -----------------------------------------------------------------------------------------

    def new_cache(self, windows: int, seqs_per_window: int = 1) -> WhisperCache:
        return WhisperCache(self, windows, seqs_per_window)

    def encode(self, mel: np.ndarray, cache: WhisperCache, window: int) -> Array:
        """Encode one window's log-mel (n_mels, 3000) and store its cross-attention keys/values as window
        `window` of the cache. Returns the encoder output (P, D)."""
        encoded = self.encoder(self.be.upload(np.ascontiguousarray(mel, dtype=np.float32)))  # (P, D)
        slots = cache.cross_slots(window)
        for layer in self.decoder.layers:
            layer.encoder_attn.write(encoded, cache, slots)
        return encoded

    def decode(
        self,
        cache: WhisperCache,
        seqs: np.ndarray,
        tokens: list[np.ndarray],
        all_logits: bool = False,
        capture: bool = False,
    ) -> np.ndarray:
        """Feed tokens[b] to sequence seqs[b] (rows grouped by window) -> host logits (B, V) of each row's last
        token, or (T, V) of every token with all_logits. capture: keep each layer's cross-attention queries
        in cache.captured (word timestamps read the alignment heads' attention from them)."""
        q_lens = np.array([len(t) for t in tokens], dtype=np.int64)
        step = cache.step(np.asarray(seqs), q_lens)
        step.capture = capture
        ids = self.be.upload(np.concatenate(tokens).astype(np.int32))  # (T,)
        last = None if all_logits else self.be.upload((np.cumsum(q_lens) - 1).astype(np.int32))
        logits = self.decoder(ids, cache, step, last)
        cache.advance(step)
        return self.be.download(logits)
