"""A tiny random Kokoro-82M (StyleTTS2 + iSTFTNet) in Kokoro's checkpoint layout, and its output from the
`kokoro` reference package.

Run with the parity venv (torch, transformers, and `kokoro` installed with --no-deps plus loguru):
    .venv-parity/bin/python tests/parity/make_kokoro_reference.py
writes tests/data/tiny_kokoro/ (config.json, kokoro-v1_0.safetensors: KModel's state dict as flat
"<component>.<name>" tensors, voices/tiny.safetensors: a voice pack, tensor "style" (N, 1, 256)) and
tests/golden/kokoro/tiny.npz: the phoneme ids IDS, the style row the pack gives them, the durations and the
waveform KModel.forward_with_tokens computes, with the harmonic source's noise off, and on the way the F0
and energy curves (f0, energy (1, 2F)) and the harmonic source's STFT features (har: [magnitude; phase]).

Noise off: iSTFTNet's SineGen draws a random initial phase for the overtones (torch.rand) and additive
noise (torch.randn_like); both are zeroed here while the model runs, and blazr's Kokoro takes the same
choice with noise=False.

Tiny: Kokoro's Decoder hard-codes widths 1024 / 512 / 64 (hidden, to the generator, the ASR residual);
TinyDecoder is the same network with those widths as arguments (16 / 8 / 4), its forward unchanged. The
style size stays 128, as KModel slices the reference style at 128.
Only kokoro.model / modules / istftnet are imported (a bare `kokoro` package stands in for its __init__,
which imports the G2P pipeline and its `misaki` dependency).
"""

from __future__ import annotations

import json
import site
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "tiny_kokoro"
GOLDEN = ROOT / "tests" / "golden" / "kokoro"
IDS = [0, 5, 17, 3, 22, 9, 12, 30, 7, 0]  # phoneme ids, with Kokoro's 0 at both ends
WIDTHS = {"hidden": 16, "to_generator": 8, "asr_res": 4}
CONFIG = {
    "vocab": {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")},
    "n_token": 32,
    "hidden_dim": 16,
    "style_dim": 128,
    "n_layer": 2,
    "max_dur": 8,
    "dropout": 0.2,
    "text_encoder_kernel_size": 5,
    "n_mels": 80,
    "plbert": {
        "hidden_size": 16,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 32,
        "num_hidden_layers": 2,
        "dropout": 0.1,
        "embedding_size": 8,
    },
    "istftnet": {
        "upsample_kernel_sizes": [4, 4],
        "upsample_rates": [2, 2],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 5],
        "upsample_initial_channel": 8,
    },
    "decoder_widths": WIDTHS,  # blazr reads widths from the weights; kept here for the record
}


def import_kokoro():
    """kokoro.model without kokoro/__init__ (see the module docstring)."""
    for base in site.getsitepackages():
        if (Path(base) / "kokoro" / "model.py").is_file():
            package = types.ModuleType("kokoro")
            package.__path__ = [str(Path(base) / "kokoro")]
            sys.modules["kokoro"] = package
            break
    import kokoro.istftnet as istftnet
    import kokoro.model as model

    return model, istftnet


def tiny_decoder_class(istftnet):
    import torch.nn as nn
    from torch.nn.utils import weight_norm

    class TinyDecoder(istftnet.Decoder):
        def __init__(self, dim_in, style_dim, dim_out, disable_complex=False, **gen):
            nn.Module.__init__(self)
            hid, out, res = WIDTHS["hidden"], WIDTHS["to_generator"], WIDTHS["asr_res"]
            block = istftnet.AdainResBlk1d
            self.encode = block(dim_in + 2, hid, style_dim)
            self.decode = nn.ModuleList([block(hid + 2 + res, hid, style_dim) for _ in range(3)])
            self.decode.append(block(hid + 2 + res, out, style_dim, upsample=True))
            self.F0_conv = weight_norm(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
            self.N_conv = weight_norm(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
            self.asr_res = nn.Sequential(weight_norm(nn.Conv1d(dim_in, res, kernel_size=1)))
            self.generator = istftnet.Generator(style_dim, **gen, disable_complex=disable_complex)

    return TinyDecoder


def build(model, istftnet):
    import torch
    from transformers import AlbertConfig

    model.Decoder = tiny_decoder_class(istftnet)
    c = CONFIG
    m = model.KModel.__new__(model.KModel)  # KModel.__init__ without its download and load
    torch.nn.Module.__init__(m)
    m.vocab = c["vocab"]
    m.bert = model.CustomAlbert(AlbertConfig(vocab_size=c["n_token"], **c["plbert"]))
    m.bert_encoder = torch.nn.Linear(m.bert.config.hidden_size, c["hidden_dim"])
    m.context_length = m.bert.config.max_position_embeddings
    m.predictor = model.ProsodyPredictor(
        style_dim=c["style_dim"],
        d_hid=c["hidden_dim"],
        nlayers=c["n_layer"],
        max_dur=c["max_dur"],
        dropout=0.2,
    )
    m.text_encoder = model.TextEncoder(
        channels=c["hidden_dim"],
        kernel_size=c["text_encoder_kernel_size"],
        depth=c["n_layer"],
        n_symbols=c["n_token"],
    )
    m.decoder = model.Decoder(
        dim_in=c["hidden_dim"], style_dim=c["style_dim"], dim_out=c["n_mels"], **c["istftnet"]
    )
    return m.eval()


def randomise(m, seed: int):
    """Every parameter re-drawn; the F0 projection biased to ~150 Hz so the harmonic source is voiced."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if ".alpha" in name or name.endswith("weight_g"):  # snake's alpha and weight norm's gain: > 0
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        m.predictor.duration_proj.linear_layer.weight.mul_(20.0)  # durations of 1..8 frames, not all alike
        m.decoder.generator.conv_post.weight_g.mul_(0.1)  # log-magnitudes near 0: a unit-sized waveform
        m.predictor.F0_proj.bias.fill_(150.0)
        m.predictor.N_proj.bias.fill_(0.0)


def run(m, ids, ref_s, istftnet):
    """KModel.forward_with_tokens with noise off -> audio, durations, and what the test checks on the way:
    the F0 and energy curves and the harmonic source's STFT features."""
    import torch

    seen = {}
    stft = m.decoder.generator.stft
    transform = stft.transform

    def recording_transform(x):
        mag, phase = transform(x)
        seen["har"] = torch.cat([mag, phase], dim=1)[0].numpy().copy()
        return mag, phase

    f0ntrain = m.predictor.F0Ntrain

    def recording_f0ntrain(x, s):
        f0, n = f0ntrain(x, s)
        seen["f0"], seen["energy"] = f0.numpy().copy(), n.numpy().copy()
        return f0, n

    stft.transform, m.predictor.F0Ntrain = recording_transform, recording_f0ntrain

    sine_gen = istftnet.SineGen
    original = sine_gen.forward

    def quiet_forward(self, f0):  # noise off: no random overtone phase, no additive noise
        rand, randn_like = torch.rand, torch.randn_like
        torch.rand = lambda *a, **k: torch.zeros(*a[:2], device=k.get("device"))
        torch.randn_like = torch.zeros_like
        try:
            return original(self, f0)
        finally:
            torch.rand, torch.randn_like = rand, randn_like

    sine_gen.forward = quiet_forward
    try:
        with torch.no_grad():
            audio, dur = m.forward_with_tokens(torch.tensor([ids]), torch.tensor(ref_s), 1.0)
    finally:
        sine_gen.forward = original
        del stft.transform, m.predictor.F0Ntrain
    return audio.numpy().astype(np.float32), dur.numpy(), seen


def main():
    import torch
    from safetensors.numpy import save_file

    model, istftnet = import_kokoro()
    rng = np.random.default_rng(7)
    pack = (rng.standard_normal((12, 1, 256)) * 0.5).astype(np.float32)  # (N, 1, 256): a row per length
    n_phonemes = len(IDS) - 2
    ref_s = pack[n_phonemes - 1]  # (1, 256): KPipeline's pack[len(ps) - 1]
    for seed in range(100):
        m = build(model, istftnet)
        randomise(m, seed)
        bert = m.bert(torch.tensor([IDS]), attention_mask=torch.ones(1, len(IDS), dtype=torch.int))
        with torch.no_grad():
            d_en = m.bert_encoder(bert).transpose(-1, -2)
            s = torch.tensor(ref_s[:, 128:])
            mask = torch.zeros(1, len(IDS), dtype=torch.bool)
            d = m.predictor.text_encoder(d_en, s, torch.tensor([len(IDS)]), mask)
            x, _ = m.predictor.lstm(d)
            raw = torch.sigmoid(m.predictor.duration_proj(x)).sum(axis=-1).numpy()[0]
        margin = np.abs(np.abs(raw - np.floor(raw)) - 0.5).min()  # distance from a rounding flip
        if np.all(np.abs(np.abs(raw - np.floor(raw)) - 0.5) > 0.05) and len(set(np.round(raw))) > 2:
            break
    print(f"seed {seed}: raw durations {np.round(raw, 3).tolist()} (margin {margin:.3f})")
    audio, dur, seen = run(m, IDS, ref_s, istftnet)
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / "voices").mkdir(exist_ok=True)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in CONFIG.items() if k != "decoder_widths"}
    (DATA / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    state = {k: v.detach().numpy().astype(np.float32) for k, v in m.state_dict().items()}
    state = {k: v for k, v in state.items() if "position_ids" not in k}
    save_file(state, str(DATA / "kokoro-v1_0.safetensors"))
    save_file({"style": pack}, str(DATA / "voices" / "tiny.safetensors"))
    np.savez(
        GOLDEN / "tiny.npz", ids=np.array(IDS, np.int32), ref_s=ref_s, durations=dur, audio=audio, **seen
    )
    print(
        f"{len(state)} tensors, {sum(v.size for v in state.values())} values; durations {dur.tolist()}; "
        f"audio {audio.shape} rms {np.sqrt((audio**2).mean()):.4f}"
    )


if __name__ == "__main__":
    main()
