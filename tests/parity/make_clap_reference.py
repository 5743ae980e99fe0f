"""A tiny random transformers ClapModel checkpoint (fusion off) and its outputs from transformers.

Run with the parity venv (torch + transformers 5.x):
    .venv-parity/bin/python tests/parity/make_clap_reference.py [--full DIR]
writes tests/data/tiny_clap/ (config.json, model.safetensors, preprocessor_config.json and RoBERTa tokenizer
files: what a Hugging Face ClapModel directory holds) and tests/golden/clap.npz: the clips (16-bit at 48 kHz),
the input features ClapFeatureExtractor makes of them, the texts' token ids, and ClapModel's audio and text
embeddings (L2-normalised, as get_audio_features / get_text_features return them) and logits_per_audio.

The audio tower is HTSAT as laion/clap-htsat-unfused has it, scaled down: 16 mel bins, spec_size 64 (a 64 x 64
image of 4 x 4 patches: a 16 x 16 grid), window 4, three stages of two blocks each: at 16 x 16 and 8 x 8 the
second block shifts its windows (the shift mask at two resolutions), at 4 x 4 the grid is one window and
no block shifts, as in the full model's last stage. max_length_s 1. The feature
extractor truncates with "rand_trunc" (a random crop of a longer clip): the long clip's reference features are
those of its first second, the crop blazr takes. Weights keep transformers' initialisation, then the batch
norm's running statistics, the LayerNorm scales, the relative position tables and the two logit scales are
re-drawn, so none of them is a neutral 0 / 1.

`--full DIR` writes the same files into DIR with the audio tower at transformers' default size (HTSAT-base:
64 mel bins, 256 x 256 image, window 8, stages of 2, 2, 6, 2 blocks, 768 channels; 10 s clips, a fifth one
longer, cut): too big to commit, it is checked by hand (tests/test_clap_model.py, check_full_checkpoint).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "tiny_clap"
GOLDEN = ROOT / "tests" / "golden" / "clap.npz"
RATE = 48_000
TEXTS = ("the dog runs in the park", "a man is eating bread", "what a woman", "query passage girl food")
MAX_TEXT = 40  # the tiny position table's length (positions start at padding_idx + 1)


def clips() -> list[np.ndarray]:
    """Four deterministic clips: shorter than a second (repeat-padded), exactly a second, and longer (cut).
    Their samples are 16-bit values (stored as int16, read as int16 / 32768, as a PCM_16 WAV reads)."""
    rng = np.random.default_rng(7)
    t = lambda seconds: np.arange(int(seconds * RATE)) / RATE  # noqa: E731
    tone = 0.3 * np.sin(2 * np.pi * 440 * t(0.37)) * np.exp(-3 * t(0.37))
    chirp = 0.2 * np.sin(2 * np.pi * (200 + 3000 * t(1.0)) * t(1.0))
    noise = 0.05 * rng.standard_normal(int(0.45 * RATE))
    long = 0.1 * np.sin(2 * np.pi * 90 * t(1.3)) + 0.02 * rng.standard_normal(int(1.3 * RATE))
    return [np.round(np.asarray(c) * 32768).astype(np.int16) for c in (tone, chirp, noise, long)]


def as_float(clip: np.ndarray) -> np.ndarray:
    return clip.astype(np.float32) / 32768


def build(full: bool = False):
    """The tiny model; with `full`, its audio tower at transformers' default (HTSAT-base) size instead."""
    import torch
    from transformers import ClapAudioConfig, ClapConfig, ClapModel, ClapTextConfig

    from tests.tiny_encoder_families import vocab_size

    text = ClapTextConfig(
        vocab_size=vocab_size("roberta"),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_TEXT + 2,
    )
    audio = ClapAudioConfig(
        window_size=4,
        num_mel_bins=16,
        spec_size=64,
        patch_size=4,
        patch_stride=[4, 4],
        hidden_size=32,
        depths=[2, 2, 2],
        num_attention_heads=[2, 2, 4],
        patch_embeds_hidden_size=8,
        enable_fusion=False,
    )
    if full:
        audio = ClapAudioConfig(enable_fusion=False)
    config = ClapConfig(text_config=text.to_dict(), audio_config=audio.to_dict(), projection_dim=24)
    torch.manual_seed(0)
    model = ClapModel(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "norm" in name.lower() and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name.lower() and name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        bn = model.audio_model.audio_encoder.batch_norm
        bn.running_mean.copy_(-40 + 5 * torch.randn(bn.running_mean.shape, generator=g))
        bn.running_var.copy_(200 * (0.5 + torch.rand(bn.running_var.shape, generator=g)))
        model.logit_scale_a.fill_(math.log(12.0))
        model.logit_scale_t.fill_(math.log(9.0))
    return model


def main(data: Path = DATA, golden: Path = GOLDEN, full: bool = False) -> None:
    import torch
    from transformers import ClapFeatureExtractor, RobertaTokenizerFast

    from tests.tiny_encoder_families import write_bpe_tokenizer

    data.mkdir(parents=True, exist_ok=True)
    model = build(full)
    model.save_pretrained(data)
    features = ClapFeatureExtractor(
        feature_size=64 if full else 16,
        max_length_s=10 if full else 1,
        frequency_min=50,
        truncation="rand_trunc",
        padding="repeatpad",
    )
    features.save_pretrained(data)
    write_bpe_tokenizer(data, MAX_TEXT)
    tokenizer = RobertaTokenizerFast.from_pretrained(data)

    waves = clips()
    if full:  # and one longer than 10 s, to be cut
        waves.append(np.tile(waves[3], 9))
    cropped = [
        as_float(w)[: features.nb_max_samples] for w in waves
    ]  # blazr's crop of a long clip: its start
    inputs = features(cropped, sampling_rate=RATE, return_tensors="pt")
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    padded = tokenizer(list(TEXTS), padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(
            input_ids=padded["input_ids"],
            attention_mask=padded["attention_mask"],
            input_features=inputs["input_features"],
        )
    golden.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        golden,
        **{f"clip{i}": w for i, w in enumerate(waves)},
        input_features=inputs["input_features"].numpy(),  # (clips, 1, frames, mel bins)
        **{f"ids{i}": np.asarray(x, dtype=np.int32) for i, x in enumerate(ids)},
        audio_embeds=out.audio_embeds.numpy(),  # (clips, projection_dim), unit length
        text_embeds=out.text_embeds.numpy(),  # (texts, projection_dim), unit length
        logits_per_audio=out.logits_per_audio.numpy(),  # (clips, texts)
        texts=np.asarray(TEXTS),
    )
    size = sum(p.stat().st_size for p in data.iterdir())
    print(f"wrote {data} ({size / 1024:.0f} KiB) and {golden}")
    print("logits_per_audio:\n", out.logits_per_audio.numpy().round(3))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--full"]:  # a one-off check of the full-size audio tower (~110 MB): not committed
        out = Path(sys.argv[2])
        main(out, out / "clap_full.npz", full=True)
    else:
        main()
