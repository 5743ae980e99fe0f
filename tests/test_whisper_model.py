"""Whisper's network on every backend against transformers (tests/golden/whisper/tiny_*.npz, made by
tests/parity/make_whisper_reference.py from the tiny random checkpoints of tests/tiny_whisper.py): encoder
output within tolerance, greedy ids identical, logits close; and the decoding caches (windows batched,
beams reordered) give what one sequence alone gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blazr.models.whisper import Model, ModelArgs
from tests import tiny_whisper

GOLDEN = Path(__file__).parent / "golden" / "whisper"


def build(backend, case: str) -> Model:
    model = Model(ModelArgs.from_dict(tiny_whisper.config(case)), backend)
    model.load_weights(model.sanitize(tiny_whisper.weights(case)))
    return model


@pytest.mark.parity
@pytest.mark.parametrize("case", tiny_whisper.CASES)
def test_encoder_and_greedy_decoding_equal_transformers(backend, case):
    ref = np.load(GOLDEN / f"tiny_{case}.npz")
    model = build(backend, case)
    cache = model.new_cache(1)
    encoded = backend.download(model.encode(tiny_whisper.random_mel(case), cache, 0))  # (1500, D)
    np.testing.assert_allclose(encoded[::10], ref["encoder_rows"], rtol=1e-4, atol=2e-4)
    ids, feed = [], np.array(tiny_whisper.prompt(case))
    for step in range(len(ref["ids"])):
        logits = model.decode(cache, np.array([0]), [feed])[0]  # (V,)
        np.testing.assert_allclose(logits[ref["vocab_subset"]], ref["logits"][step], rtol=1e-3, atol=2e-3)
        ids.append(int(np.argmax(logits)))
        feed = np.array([ids[-1]])
    assert ids == list(ref["ids"])


def test_windows_and_beams_batched_equal_each_alone(backend):
    model = build(backend, "en")
    mels = [tiny_whisper.random_mel("en"), tiny_whisper.random_mel("multi")]
    prompt = np.array(tiny_whisper.prompt("en"))
    alone = []
    for mel in mels:
        cache = model.new_cache(1)
        model.encode(mel, cache, 0)
        alone.append(
            model.decode(
                cache,
                np.array([0]),
                [
                    prompt,
                ],
            )[0]
        )
        alone.append(model.decode(cache, np.array([0]), [np.array([11, 12])], all_logits=True))
    # two windows of two beams each; prompts go one window at a time, then steps of one token per row
    cache = model.new_cache(2, seqs_per_window=2)
    for w, mel in enumerate(mels):
        model.encode(mel, cache, w)
    first = model.decode(cache, np.array([0]), [prompt])
    second = model.decode(cache, np.array([2, 3]), [prompt, prompt[:2]])
    np.testing.assert_allclose(first[0], alone[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second[0], alone[2], rtol=1e-4, atol=1e-4)
    model.decode(cache, np.array([3]), [prompt[2:]])  # sequence 3 catches up in two calls
    cache.reorder(np.array([1]), np.array([0]))  # beam 1 of window 0 continues beam 0
    for token in range(2):  # both windows in one call, one token per row
        later = model.decode(cache, np.array([1, 3]), [np.array([11 + token])] * 2)
        np.testing.assert_allclose(later[0], alone[1][token], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(later[1], alone[3][token], rtol=1e-4, atol=1e-4)
