"""Tiny random-weight Whisper checkpoints (English-only and multilingual) in Hugging Face's layout.

`weights(case)` gives the tensors under transformers' `WhisperForConditionalGeneration` names and
`config(case)` its config.json; `write(case, directory)` writes both as a model directory transformers and
blazr load. The vocabularies have the real sizes (51864 English-only, 51865 multilingual) so every special
token sits where the real models keep it; the rest is small (d_model 32, two layers each side) but keeps the
real 30 s window (3000 mel frames -> 1500 encoder positions, 448 decoder positions).
tests/parity/make_whisper_reference.py runs them through transformers to make tests/golden/whisper/*.npz.
Weights come from a fixed seed with numpy only: changing anything here changes them, so rerun that script
and commit the new golden files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CASES = ("en", "multi")

_DIMS = dict(d_model=32, encoder_ffn_dim=128, decoder_ffn_dim=128, encoder_layers=2, decoder_layers=2)
_HEADS = 4
# (decoder layer, head) pairs whose cross-attention follows the audio: word timestamps use them
ALIGNMENT_HEADS = ((1, 0), (1, 2))


def vocab_size(case: str) -> int:
    return 51864 if case == "en" else 51865


def special_ids(case: str) -> dict[str, int]:
    """The ids openai-whisper's tokenizer gives these tokens for this vocabulary size."""
    eot = 50256 if case == "en" else 50257
    return dict(
        eot=eot, sot=eot + 1, transcribe=vocab_size(case) - 1506, no_timestamps=vocab_size(case) - 1502
    )


def config(case: str, text_positions: int = 448) -> dict:
    """text_positions: the decoder's context (Whisper's 448). Random weights never sample the end token, so
    each window decodes until its room (at most half the context) is full: the CLI and server tests, which
    compare against blazr's own transcripts rather than a reference, use 48 to decode ~5x fewer tokens."""
    ids = special_ids(case)
    return dict(
        architectures=["WhisperForConditionalGeneration"],
        model_type="whisper",
        vocab_size=vocab_size(case),
        num_mel_bins=80,
        encoder_attention_heads=_HEADS,
        decoder_attention_heads=_HEADS,
        max_source_positions=1500,
        max_target_positions=text_positions,
        activation_function="gelu",
        scale_embedding=False,
        tie_word_embeddings=True,
        pad_token_id=ids["eot"],
        bos_token_id=ids["eot"],
        eos_token_id=ids["eot"],
        decoder_start_token_id=ids["sot"],
        torch_dtype="float32",
        **_DIMS,
    )


def sinusoids(length: int, channels: int) -> np.ndarray:
    """(length, channels) float32: Whisper's fixed encoder position table (sin half, then cos half)."""
    increment = np.log(10000) / (channels // 2 - 1)
    inv = np.exp(-increment * np.arange(channels // 2))  # (channels / 2,)
    angles = np.arange(length)[:, None] * inv[None, :]  # (length, channels / 2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


def weights(case: str, text_positions: int = 448) -> dict[str, np.ndarray]:
    cfg = config(case, text_positions)
    rng = np.random.default_rng(1500 + CASES.index(case))
    d, mels = cfg["d_model"], cfg["num_mel_bins"]

    def rand(*shape: int, std: float = 0.25) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.weight": 1 + rand(d, std=0.1), f"{prefix}.bias": rand(d, std=0.1)}

    def attention(prefix: str) -> dict[str, np.ndarray]:
        out = {f"{prefix}.{p}_proj.weight": rand(d, d, std=d**-0.5) for p in ("q", "k", "v", "out")}
        # k_proj has no bias in Whisper
        return out | {f"{prefix}.{p}_proj.bias": rand(d, std=0.1) for p in ("q", "v", "out")}

    def mlp(prefix: str, ffn: int) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.fc1.weight": rand(ffn, d, std=d**-0.5),
            f"{prefix}.fc1.bias": rand(ffn, std=0.1),
            f"{prefix}.fc2.weight": rand(d, ffn, std=ffn**-0.5),
            f"{prefix}.fc2.bias": rand(d, std=0.1),
        }

    enc = "model.encoder"
    out = {
        f"{enc}.conv1.weight": rand(d, mels, 3, std=(3 * mels) ** -0.5),
        f"{enc}.conv1.bias": rand(d, std=0.1),
        f"{enc}.conv2.weight": rand(d, d, 3, std=(3 * d) ** -0.5),
        f"{enc}.conv2.bias": rand(d, std=0.1),
        f"{enc}.embed_positions.weight": sinusoids(cfg["max_source_positions"], d),
    }
    for i in range(cfg["encoder_layers"]):
        p = f"{enc}.layers.{i}"
        out |= attention(f"{p}.self_attn") | norm(f"{p}.self_attn_layer_norm")
        out |= mlp(p, cfg["encoder_ffn_dim"]) | norm(f"{p}.final_layer_norm")
    out |= norm(f"{enc}.layer_norm")
    dec = "model.decoder"
    # small token embeddings (as trained ones are): large ones make the tied head echo the input token
    out[f"{dec}.embed_tokens.weight"] = rand(cfg["vocab_size"], d, std=0.05)
    out[f"{dec}.embed_positions.weight"] = rand(cfg["max_target_positions"], d, std=0.5)
    for i in range(cfg["decoder_layers"]):
        p = f"{dec}.layers.{i}"
        out |= attention(f"{p}.self_attn") | norm(f"{p}.self_attn_layer_norm")
        out |= attention(f"{p}.encoder_attn") | norm(f"{p}.encoder_attn_layer_norm")
        out |= mlp(p, cfg["decoder_ffn_dim"]) | norm(f"{p}.final_layer_norm")
    out |= norm(f"{dec}.layer_norm")
    return out


def write(case: str, directory: Path, text_positions: int = 448) -> Path:
    """A model directory (config.json + model.safetensors) of this case; returns it."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config(case, text_positions), indent=1))
    save_file(weights(case, text_positions), str(directory / "model.safetensors"))
    return directory


def prompt(case: str) -> list[int]:
    """<|startoftranscript|> [<|en|>] <|transcribe|> <|notimestamps|>."""
    ids = special_ids(case)
    language = [ids["sot"] + 1] if case == "multi" else []  # <|en|>
    return [ids["sot"], *language, ids["transcribe"], ids["no_timestamps"]]


def random_mel(case: str) -> np.ndarray:
    """(80, 3000) float32 in log-mel's range: one window's encoder input, from a fixed seed."""
    rng = np.random.default_rng(7 + CASES.index(case))
    return rng.uniform(-1.0, 1.5, size=(80, 3000)).astype(np.float32)


def random_audio(seconds: float, seed: int = 0) -> np.ndarray:
    """(seconds * 16000,) float32 test signal: tones under noise, so the mel frames differ."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = sum(np.sin(2 * np.pi * f * t) * a for f, a in ((220, 0.3), (587, 0.2), (1330, 0.1)))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 0.7 * t)
    return (tone * envelope + rng.standard_normal(t.shape) * 0.05).astype(np.float32)
