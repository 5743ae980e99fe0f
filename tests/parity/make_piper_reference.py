"""Reference outputs of the real Piper voice (catalog `piper-joe`) from onnxruntime, Piper's own runtime.

Run with a Python that has onnxruntime and piper-phonemize (the repo's parity venv):
    python tests/parity/make_piper_reference.py
writes tests/golden/piper/joe.npz: for each sentence in SENTENCES, the phoneme ids blazr's phonemizer gives
(ids_<i>) and the waveform onnxruntime computes from them with noise off (scales [0, 1, 0]: noise_scale 0,
length_scale 1, noise_w 0), before any volume normalisation (audio_<i>); and tests/golden/piper/phonemes.json:
piper-phonemize's phonemes for PHONEME_TEXTS (Piper's own espeak-ng binding), for the phonemizer test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SENTENCES = ("Hello world.", "The quick brown fox jumps over the lazy dog, twice!")
PHONEME_TEXTS = (
    "Hello world, this is a test.",
    "It costs $3.50, e.g. today. Dr. Smith is 42!",
    "Please buy milk, eggs and bread on your way home.",
    "Wait; what? Yes: no.",
    "Café, naïve — résumé.",
)
OUT = ROOT / "tests" / "golden" / "piper"


def main() -> None:
    import onnxruntime
    import piper_phonemize

    from blazr.loaders.registry import CATALOG, fetch
    from blazr.tasks.espeak_phonemes import phonemize

    voice_dir = fetch(CATALOG["piper-joe"], Path.home() / ".cache" / "blazr-test-models")
    onnx_path = voice_dir / "en_US-joe-medium.onnx"
    id_map = json.loads((voice_dir / "en_US-joe-medium.onnx.json").read_text())["phoneme_id_map"]
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    arrays = {}
    for i, text in enumerate(SENTENCES):
        (phonemes,) = phonemize(text, "en-us")
        ids = [1, 0] + [x for ch in phonemes if ch in id_map for x in (id_map[ch][0], 0)] + [2]
        feeds = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
        }
        (audio,) = session.run(None, feeds)
        arrays[f"ids_{i}"] = np.array(ids, dtype=np.int32)
        arrays[f"audio_{i}"] = audio.reshape(-1).astype(np.float32)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "joe.npz", **arrays)
    expected = {t: ["".join(s) for s in piper_phonemize.phonemize_espeak(t, "en-us")] for t in PHONEME_TEXTS}
    (OUT / "phonemes.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
