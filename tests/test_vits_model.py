"""Hugging Face VitsModel checkpoints (MMS-TTS's layout) on every backend against transformers.

tests/data/tiny_vits/<case>/ are tiny random VitsModel directories and tests/golden/vits/<case>.npz their
transformers outputs with noise off, both made by tests/parity/make_vits_reference.py: "sdp" (stochastic
duration predictor, one speaker, weight norm stored as parametrizations) and "speakers" (deterministic
predictor, 3 speakers, weight norm stored as weight_g / weight_v). blazr reads them through
blazr.loaders.vits_hf and must give the same frames per id and the same waveform.

Tolerance: every sample within 1e-4 (measured about 7e-7 on the CPU backends). The waveform leaves a float32
network of ~40 layers (text encoder, 2-flow duration splines, flow, a 16x upsampling HiFi-GAN) summed in
another order than PyTorch's; the reference's weights are drawn so no sample sits on tanh's flat ends,
where errors would hide, and no duration lies near a whole number of frames, where rounding up could flip.
The log-durations within 1e-4 too (they pass through exp and a spline).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blazr.loaders.vits_hf import is_hf_vits, read_hf_vits
from blazr.models.vits import Model, ModelArgs

DATA = Path(__file__).parent / "data" / "tiny_vits"
GOLDEN = Path(__file__).parent / "golden" / "vits"
CASES = ("sdp", "speakers")
TOLERANCE = 1e-4


def build(backend, case: str) -> Model:
    config, weights = read_hf_vits(DATA / case)
    model = Model(ModelArgs.from_dict(config), backend)
    model.load_weights(model.sanitize(weights))
    return model


@pytest.mark.parity
@pytest.mark.parametrize("case", CASES)
def test_waveform_and_durations_equal_transformers(backend, case):
    ref = np.load(GOLDEN / f"{case}.npz")
    speaker = int(ref["speaker"])
    model = build(backend, case)
    audio = model.synthesize(
        ref["ids"], 0.0, 1.0, 0.0, np.random.default_rng(0), speaker=None if speaker < 0 else speaker
    )
    logw = model.last_log_durations
    np.testing.assert_allclose(logw, ref["log_durations"], atol=TOLERANCE)
    assert np.array_equal(np.ceil(np.exp(logw)).astype(np.int32), ref["frames"])
    assert audio.shape == ref["waveform"].shape
    assert np.abs(audio - ref["waveform"]).max() < TOLERANCE


def test_config_and_weight_names_read():
    assert is_hf_vits(DATA / "sdp") and not is_hf_vits(DATA)
    config, weights = read_hf_vits(DATA / "speakers")
    assert not config["use_stochastic_duration_prediction"] and config["speaker_embedding_size"] == 4
    assert "emb_g.weight" in weights and "dp.conv_1.weight" in weights
    assert not any(k.startswith(("posterior_encoder", "text_encoder")) or "weight_g" in k for k in weights)
    _, weights = read_hf_vits(DATA / "sdp")
    assert (
        "dp.flows.5.pre.weight" in weights and "dp.flows.1.pre.weight" not in weights
    )  # 3 ConvFlows, first dropped
    assert "flow.flows.2.enc.in_layers.1.weight" in weights and "dec.ups.1.weight" in weights


def test_tokenizer_equals_vits_tokenizer():
    from blazr.tasks.vits_chars import CharTokenizer

    tokenizer = CharTokenizer.from_dir(DATA / "sdp")
    for text, ids in json.loads((GOLDEN / "tokens.json").read_text(encoding="utf-8")).items():
        assert tokenizer.ids(text).tolist() == ids, text


def test_blazr_load_gives_a_synthesizer(backend):
    import blazr
    from blazr.tasks.speak import Synthesizer

    synth = blazr.load(str(DATA / "speakers"), device=backend)
    assert isinstance(synth, Synthesizer)
    assert synth.sample_rate == 16000 and (synth.noise_scale, synth.noise_w) == (0.667, 0.8)
    assert [v.id for v in synth.voices] == ["speakers:0", "speakers:1", "speakers:2"]
    ref = np.load(GOLDEN / "speakers.npz")
    assert synth.ids("Hello, tiny world!").tolist() == ref["ids"].tolist()
    speech = synth.synthesize("Hello, tiny world! Second one.", voice="speakers:2", seed=3)
    assert len(speech.sentences) == 2 and speech.sample_rate == 16000
    assert speech.sentences[0].text == "hello tiny world"
    quiet = synth.synthesize("Hello, tiny world!", voice="speakers:2", noise_scale=0.0, noise_w=0.0)
    expected = ref["waveform"] / max(0.01, np.abs(ref["waveform"]).max())  # peak-normalised, as Piper does
    assert np.abs(quiet.audio - expected).max() < 10 * TOLERANCE
