"""Reference transcripts with word timestamps of the real whisper tiny.en from openai-whisper itself.

Run with a Python that has torch, openai-whisper and blazr importable (the repo's parity venv, from the
repo root):
    python tests/parity/make_whisper_words_reference.py
The catalog's tiny.en (CTranslate2 float16) is read with blazr's reader, renamed to openai-whisper's names
and loaded into openai-whisper's model (float32); the first five clips of tests/data/speech, joined with
one second of silence, are transcribed greedily (temperature 0, no fallback) with word_timestamps=True.
Writes tests/golden/whisper/words_tiny_en.json: each segment's text, times and words (word, start, end,
probability).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from blazr.loaders.whisper_formats import read_whisper_checkpoint  # noqa: E402
from blazr.model_dir import resolve_model  # noqa: E402
from tests import speech_set  # noqa: E402

OUT = ROOT / "tests" / "golden" / "whisper" / "words_tiny_en.json"
CLIPS = 5


def audio() -> np.ndarray:
    silence = np.zeros(16000, dtype=np.float32)
    parts = [p for i in range(CLIPS) for p in (speech_set.load(i), silence)]
    return np.concatenate(parts)


def openai_model():
    from tests.parity.openai_whisper_model import openai_whisper_model

    return openai_whisper_model(*read_whisper_checkpoint(resolve_model("whisper-tiny.en")))


def main() -> None:
    import whisper

    result = whisper.transcribe(
        openai_model(), audio(), temperature=0.0, word_timestamps=True, language="en", verbose=None
    )
    segments = [
        {
            "text": s["text"],
            "start": s["start"],
            "end": s["end"],
            "words": [[w["word"], w["start"], w["end"], w["probability"]] for w in s["words"]],
        }
        for s in result["segments"]
    ]
    OUT.write_text(json.dumps({"clips": CLIPS, "segments": segments}, indent=1, ensure_ascii=False) + "\n")
    for s in segments:
        print(s["start"], s["end"], s["text"])


if __name__ == "__main__":
    main()
