"""Reference transcripts of the tiny random Whisper checkpoints from openai-whisper's own `transcribe()`.

Run with a Python that has torch and openai-whisper (the repo's parity venv; install the sdist named in
models.md with --no-deps, plus tiktoken, more-itertools, tqdm and numba):
    python tests/parity/make_whisper_transcribe_reference.py
writes tests/golden/whisper/transcribe_<case>.json: for 75 s of tests.tiny_whisper.random_audio (three
windows and more), the segments (seek, start, end, token ids) of greedy decoding and of beam search (5),
with timestamps, conditioning on previous text, no temperature fallback, suppress_tokens "" and no blank
suppression (the tiny models have no tokenizer, so only token ids can be compared), and the language
probabilities of the first window for the multilingual case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import tiny_whisper  # noqa: E402

OUT = ROOT / "tests" / "golden" / "whisper"
SECONDS = 75.0
OPTIONS = dict(
    temperature=0.0,
    suppress_tokens="",
    suppress_blank=False,
    condition_on_previous_text=True,
    compression_ratio_threshold=None,
    verbose=None,
)


def openai_model(case: str):
    from tests.parity.openai_whisper_model import openai_whisper_model

    cfg, weights = tiny_whisper.config(case), tiny_whisper.weights(case)
    return openai_whisper_model(cfg, weights, tiny_whisper.ALIGNMENT_HEADS)


def main() -> None:
    import whisper

    audio = tiny_whisper.random_audio(SECONDS)
    for case in tiny_whisper.CASES:
        model = openai_model(case)
        language = "en" if case == "multi" else None
        out: dict = {"seconds": SECONDS}
        for name, extra in (("greedy", {}), ("beam5", {"beam_size": 5})):
            result = whisper.transcribe(model, audio, language=language, **OPTIONS, **extra)
            out[name] = [
                {k: s[k] for k in ("seek", "start", "end", "tokens", "avg_logprob", "no_speech_prob")}
                for s in result["segments"]
            ]
            print(case, name, [(s["start"], s["end"], len(s["tokens"])) for s in result["segments"]])
        if case == "multi":
            mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(torch.from_numpy(audio)))
            _, probs = model.detect_language(mel)
            out["language_probs"] = {k: float(v) for k, v in probs.items()}
        (OUT / f"transcribe_{case}.json").write_text(json.dumps(out, indent=None) + "\n")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
