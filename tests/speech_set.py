"""The committed speech clips (tests/data/speech, made by tests/parity/make_speech_set.py with espeak-ng) and
their transcripts, for the Whisper tests: one clip at a time, or all of them joined into one long-form recording
with known sentence times."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import soundfile

SPEECH_DIR = Path(__file__).parent / "data" / "speech"
RATE = 16000


@cache
def sentences() -> tuple[str, ...]:
    """The text of each clip, in clip order (line i of sentences.txt is NN.flac with NN = i)."""
    return tuple(line for line in (SPEECH_DIR / "sentences.txt").read_text().splitlines() if line.strip())


def path(i: int) -> Path:
    return SPEECH_DIR / f"{i:02d}.flac"


def load(i: int) -> np.ndarray:
    """Clip i as float32 (samples,) at 16 kHz, read with soundfile directly so these tests do not depend on the
    decoder under test."""
    audio, rate = soundfile.read(path(i), dtype="float32")  # (samples,)
    assert rate == RATE, f"{path(i)} is {rate} Hz; remake the set with tests/parity/make_speech_set.py"
    return audio


def long_form(seconds_of_silence: float = 1.0) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """Every clip in order with `seconds_of_silence` of zeros between them: the audio, float32 (samples,) at
    16 kHz, and each sentence's (text, start_s, end_s) on that timeline. Each clip keeps 0.1 s of silence at
    either end, so a span is its speech plus that margin."""
    gap = np.zeros(round(seconds_of_silence * RATE), dtype=np.float32)  # (gap,)
    pieces: list[np.ndarray] = []
    spans: list[tuple[str, float, float]] = []
    at = 0
    for i, text in enumerate(sentences()):
        if i:
            pieces.append(gap)
            at += gap.size
        clip = load(i)  # (samples,)
        spans.append((text, at / RATE, (at + clip.size) / RATE))
        pieces.append(clip)
        at += clip.size
    return np.concatenate(pieces), spans
