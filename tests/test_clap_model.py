"""Hugging Face ClapModel checkpoints (laion/clap-htsat-unfused's layout) on every backend against transformers.

tests/data/tiny_clap/ is a tiny random ClapModel directory with fusion off and tests/golden/clap.npz its
transformers outputs, both made by tests/parity/make_clap_reference.py: four 16-bit clips (shorter than the model's
second, repeat-padded; exactly a second; longer, cut), their ClapFeatureExtractor features, four texts' token
ids, and ClapModel's unit audio and text embeddings and logits_per_audio.

Tolerances: features within 1e-4 dB (measured 0: the same float64 STFT, rounded through complex64 as
transformers does); embeddings within 1e-5 per component (measured ~2e-7 on cpu and wgpu: unit vectors out of
two float32 towers of a few layers, summed in another order than PyTorch); logits within 1e-4 (those times
the logit scale 12).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from blazr.audio.clap_features import ClapFeatures
from blazr.errors import UnsupportedError
from blazr.models.clap_audio import AudioArgs, bicubic_matrix
from blazr.models.layers.window_attention import relative_bias, shift_mask, window_order
from blazr.tasks.sound_rank import ClapRanker, is_clap

DATA = Path(__file__).parent / "data" / "tiny_clap"
GOLDEN = Path(__file__).parent / "golden" / "clap.npz"
CLIPS = 4


@pytest.fixture(scope="module")
def ref():
    return np.load(GOLDEN)


def clip(ref, name: str) -> np.ndarray:
    """A golden clip's 16-bit samples as float32, as a PCM_16 WAV of them reads."""
    return ref[name].astype(np.float32) / 32768


def test_features_equal_transformers(ref):
    features = ClapFeatures.load(DATA)
    for i in range(CLIPS):
        ours = features(clip(ref, f"clip{i}"))
        np.testing.assert_allclose(ours, ref["input_features"][i, 0], atol=1e-4)


@pytest.mark.parity
def test_embeddings_and_logits_equal_transformers(backend, ref):
    ranker = ClapRanker.load(DATA, device=backend)
    audio = np.stack([ranker.model.embed_audio(ranker.features(clip(ref, f"clip{i}"))) for i in range(CLIPS)])
    text = ranker.model.embed_text([list(ref[f"ids{i}"]) for i in range(CLIPS)])
    np.testing.assert_allclose(audio, ref["audio_embeds"], atol=1e-5)
    np.testing.assert_allclose(text, ref["text_embeds"], atol=1e-5)
    np.testing.assert_allclose(ranker.model.logits_per_audio(audio, text), ref["logits_per_audio"], atol=1e-4)


def test_tokenizer_gives_transformers_ids(ref):
    ranker = ClapRanker.load(DATA)
    for i, text in enumerate(ref["texts"]):
        assert ranker.token_ids(str(text)) == list(ref[f"ids{i}"])
    long = ranker.token_ids("the dog " * 100)
    assert len(long) == ranker.model.text_model.max_positions and long[0] == 0 and long[-1] == 2


def test_window_helpers():
    order = window_order(4, 4, 2, 0)  # 4 windows of 2x2 over a 4x4 grid, row-major
    assert order[:4].tolist() == [0, 1, 4, 5] and sorted(order.tolist()) == list(range(16))
    shifted = window_order(4, 4, 2, 1)  # rolled by -1: the first window starts at grid (1, 1)
    assert shifted[:4].tolist() == [5, 6, 9, 10]
    mask = shift_mask(4, 4, 2, 1)  # (4, 4, 4): only the last window mixes tokens from 4 regions
    assert (mask[0] == 0).all() and (mask[3] != 0).sum() == 12
    assert (shift_mask(4, 4, 2, 0) == 0).all()
    table = np.arange(9 * 2, dtype=np.float64).reshape(9, 2)  # window 2: offsets -1..1 in each axis
    bias = relative_bias(table, 2)  # (2, 4, 4)
    assert bias[0, 0, 0] == table[4, 0] and bias[1, 0, 3] == table[0, 1]  # offset (0, 0); (-1, -1)


def test_bicubic_matrix_keeps_ends_and_sums_to_one():
    m = bicubic_matrix(101, 256)
    assert np.allclose(m.sum(axis=1), 1.0) and m[0, 0] == 1.0 and m[-1, -1] == pytest.approx(1.0)
    assert np.allclose(bicubic_matrix(7, 7), np.eye(7))


def test_unsupported_configs_are_named():
    with pytest.raises(UnsupportedError, match="enable_fusion"):
        AudioArgs.from_dict({"enable_fusion": True})
    with pytest.raises(UnsupportedError, match="overlapping"):
        AudioArgs.from_dict({"patch_size": 4, "patch_stride": [2, 2]})
    assert is_clap(DATA) and not is_clap(DATA.parent)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("BLAZR_CLAP_FULL"), reason="set BLAZR_CLAP_FULL to a --full DIR")
def test_full_size_audio_tower_equals_transformers(backend):
    """By hand: `make_clap_reference.py --full DIR`, then BLAZR_CLAP_FULL=DIR. HTSAT-base's window 8, four stages
    (the last one a single unshifted window) and 10 s clips, one cut."""
    full = Path(os.environ["BLAZR_CLAP_FULL"])
    ref = np.load(full / "clap_full.npz")
    ranker = ClapRanker.load(full, device=backend)
    names = sorted(k for k in ref.files if k.startswith("clip"))
    for i, name in enumerate(names):
        np.testing.assert_allclose(ranker.features(clip(ref, name)), ref["input_features"][i, 0], atol=1e-4)
        np.testing.assert_allclose(
            ranker.model.embed_audio(ref["input_features"][i, 0]), ref["audio_embeds"][i], atol=1e-5
        )


def test_loading_it_for_another_task_names_sound_review():
    """A CLAP checkpoint is neither a generator nor an embedder: both say what runs it."""
    import blazr
    from blazr.loaders import load_checkpoint
    from blazr.tasks.embed import Embedder

    with pytest.raises(UnsupportedError, match="sound-text model .CLAP.*blazr sound-review"):
        blazr.load(str(DATA))
    with pytest.raises(UnsupportedError, match="sound-text model .CLAP.*blazr sound-review"):
        Embedder.load(load_checkpoint(DATA))
