"""Tiny random transformers VitsModel checkpoints (MMS-TTS's layout) and their outputs from transformers.

Run with the parity venv (torch + transformers 5.x):
    .venv-parity/bin/python tests/parity/make_vits_reference.py
writes, for each case in CASES, tests/data/tiny_vits/<case>/ (config.json, model.safetensors, vocab.json,
tokenizer_config.json: what a Hugging Face VitsModel directory holds) and tests/golden/vits/<case>.npz: the
ids the tokenizer gives TEXT, the waveform VitsModel computes from them with noise off (noise_scale and
noise_scale_duration 0; the saved config keeps MMS-TTS's defaults), the duration predictor's log-durations
and the frames per id. tests/golden/vits/tokens.json holds VitsTokenizer's ids for TOKEN_TEXTS.

Cases: "sdp" (the stochastic duration predictor, one speaker, dilated WaveNet) and "speakers" (the
deterministic predictor, 3 speakers with embeddings conditioning the predictor, the flow and the decoder,
another LeakyReLU slope; its file stores weight norm in the older weight_g / weight_v form, as MMS-TTS's
hub checkpoints do). transformers' HiFi-GAN only has the first residual block kind, so no "2" case.
The weights are re-drawn so that every duration is 2..6 frames and none lies near a whole number of
frames (a rounding up that float32 differences could flip).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "tiny_vits"
GOLDEN = ROOT / "tests" / "golden" / "vits"
TEXT = "Hello, tiny world!"
TOKEN_TEXTS = ("Hello, World!", "It's 42 -- OK?", "  two  spaces ", "MiXeD caSe", "ÀÉ unknown ✓ chars")
VOCAB = {"_": 0, " ": 1, "'": 2, "-": 3} | {c: 4 + i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
COMMON = dict(
    vocab_size=len(VOCAB),
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    window_size=2,
    ffn_dim=32,
    ffn_kernel_size=3,
    flow_size=8,
    spectrogram_bins=8,
    duration_predictor_num_flows=3,
    prior_encoder_num_flows=2,
    prior_encoder_num_wavenet_layers=2,
    posterior_encoder_num_wavenet_layers=1,
    upsample_initial_channel=32,
    upsample_rates=[4, 4],
    upsample_kernel_sizes=[8, 8],
    resblock_kernel_sizes=[3, 5],
    resblock_dilation_sizes=[[1, 2], [1, 3]],
    sampling_rate=16000,
    pad_token_id=0,
)
CASES = {
    "sdp": dict(use_stochastic_duration_prediction=True, wavenet_dilation_rate=2),
    "speakers": dict(
        use_stochastic_duration_prediction=False,
        num_speakers=3,
        speaker_embedding_size=4,
        duration_predictor_filter_channels=24,
        leaky_relu_slope=0.2,
    ),
}
SPEAKER = {"sdp": None, "speakers": 2}
TOKENIZER_CONFIG = {
    "tokenizer_class": "VitsTokenizer",
    "add_blank": True,
    "normalize": True,
    "phonemize": False,
    "is_uroman": False,
    "language": "eng",
    "pad_token": "_",
    "unk_token": "<unk>",
}


def log_durations(model, ids, speaker):
    import torch

    captured = {}
    hook = model.duration_predictor.register_forward_hook(lambda m, i, o: captured.update(out=o))
    with torch.no_grad():
        out = model(torch.tensor([ids]), speaker_id=speaker)
    hook.remove()
    return out, captured["out"][0, 0].double().numpy()


def tune_durations(model, ids, speaker, stochastic: bool) -> None:
    """Rescale the predictor's last step so log-durations have mean log(3.5) and spread 0.3."""
    import torch

    _, logw = log_durations(model, ids, speaker)
    with torch.no_grad():
        if stochastic:  # the reversed affine step: logw = (z - m) * exp(-logs)
            affine = model.duration_predictor.flows[0]
            z = logw * math.exp(float(affine.log_scale[0, 0])) + float(affine.translate[0, 0])
            s = 0.3 / max(z.std(), 1e-6)
            affine.log_scale[0, 0] = -math.log(s)
            affine.translate[0, 0] = z.mean() - math.log(3.5) / s
        else:  # logw = proj(h): scale and shift it
            s = 0.3 / max(logw.std(), 1e-6)
            proj = model.duration_predictor.proj
            proj.weight *= s
            proj.bias[:] = s * (proj.bias - logw.mean()) + math.log(3.5)


def build(case: str, seed: int):
    import torch
    from transformers import VitsConfig, VitsModel

    torch.manual_seed(seed)
    config = VitsConfig(**(COMMON | CASES[case]))
    model = VitsModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("translate", "log_scale")) or ".norm" in name or "layer_norm" in name:
                p.add_(0.1 * torch.randn_like(p))  # not the 0 / 1 they start at, to test their mapping
        model.decoder.conv_post.weight *= 0.1  # keep most samples off tanh's flat ends, where errors hide
    model.noise_scale, model.noise_scale_duration = 0.0, 0.0
    return model


def main() -> None:
    from safetensors.numpy import load_file, save_file
    from transformers import VitsTokenizer

    GOLDEN.mkdir(parents=True, exist_ok=True)
    vocab_path = GOLDEN / "_vocab.json"
    vocab_path.write_text(json.dumps(VOCAB))
    tok_kwargs = {k: v for k, v in TOKENIZER_CONFIG.items() if k != "tokenizer_class"}
    tokenizer = VitsTokenizer(str(vocab_path), **tok_kwargs)
    vocab_path.unlink()
    tokens = {text: tokenizer(text)["input_ids"] for text in TOKEN_TEXTS}
    (GOLDEN / "tokens.json").write_text(json.dumps(tokens, indent=1, ensure_ascii=False) + "\n")
    ids = tokenizer(TEXT)["input_ids"]
    for case in CASES:
        speaker, stochastic = SPEAKER[case], CASES[case]["use_stochastic_duration_prediction"]
        for seed in range(50):
            model = build(case, seed)
            tune_durations(model, ids, speaker, stochastic)
            out, logw = log_durations(model, ids, speaker)
            frames = np.exp(logw)
            if frames.min() > 1.5 and frames.max() < 7 and np.abs(frames - np.round(frames)).min() > 0.02:
                break
        else:
            raise SystemExit(f"{case}: no seed gave well-placed durations")
        directory = DATA / case
        directory.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(directory)
        (directory / "vocab.json").write_text(json.dumps(VOCAB, indent=1, ensure_ascii=False) + "\n")
        (directory / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=1) + "\n")
        for extra in ("generation_config.json",):
            (directory / extra).unlink(missing_ok=True)
        weights = load_file(directory / "model.safetensors")
        if case == "speakers":  # the older weight-norm names
            weights = {
                k.replace(".parametrizations.weight.original0", ".weight_g").replace(
                    ".parametrizations.weight.original1", ".weight_v"
                ): v
                for k, v in weights.items()
            }
        save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
        waveform = out.waveform[0].numpy().astype(np.float32)
        np.savez(
            GOLDEN / f"{case}.npz",
            ids=np.array(ids, dtype=np.int32),
            waveform=waveform,
            log_durations=logw.astype(np.float32),
            frames=np.ceil(frames).astype(np.int32),
            speaker=np.int32(-1 if speaker is None else speaker),
        )
        print(case, "seed", seed, "ids", len(ids), "samples", len(waveform), "frames", np.ceil(frames).sum())
        print("  peak", float(np.abs(waveform).max()), "saturated", float((np.abs(waveform) > 0.95).mean()))
        print("  frames", np.ceil(frames).astype(int).tolist())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
