"""A voiceover: a script's parts spoken one after another into one recording, each part heard back by Whisper.

Each part is synthesized with its seed (take 0); when a listener is given, the take is resampled to 16 kHz,
transcribed and compared word by word with the part's text (blazr.tasks.word_check). A take that fails is
re-synthesized with seed + 1, seed + 2, ... up to `reroll` more times, stopping at the first that passes, and
the part keeps its best take: the fewest word errors, the earliest take on a tie. The kept takes are joined
with each part's pause after it (none after the last), and every part's span on that timeline is recorded for
the timing sidecar (docs/cli.md, "blazr speak").
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blazr.tasks.voiceover_script import Part
from blazr.tasks.word_check import WordCheck, compare

ASR_RATE = 16000  # Whisper's input rate
OK, OK_UNSURE, MISMATCH, UNCHECKED = "ok", "ok ?", "mismatch", "unchecked"


@dataclass
class Take:
    seed: int
    audio: np.ndarray  # (N,) float32 at the voice's rate
    heard: str | None = None  # what the listener heard; None: not checked
    check: WordCheck | None = None


def status_of(check: WordCheck | None, max_wer: float) -> str:
    """ok: every word heard as written; "ok ?": some differ, within max_wer; mismatch: more differ."""
    if check is None:
        return UNCHECKED
    if check.exact:
        return OK
    return OK_UNSURE if check.wer <= max_wer else MISMATCH


def best_take(takes: Sequence[Take]) -> Take:
    """The take with the fewest word errors; the earliest of those (the lowest seed tried) on a tie, and the
    first when none was checked."""
    if not takes:
        raise ValueError("no takes to choose from")

    def errors(take: Take) -> float:
        return float("inf") if take.check is None else take.check.errors

    return min(takes, key=errors)  # min keeps the first of equals


@dataclass
class SpokenPart:
    index: int  # 1-based, as the report numbers parts
    part: Part
    take: Take  # the take kept
    takes: int  # how many were tried
    status: str
    start: float = 0.0  # seconds into the voiceover
    end: float = 0.0

    def to_dict(self, voice: str) -> dict[str, Any]:
        check = self.take.check
        return {
            "index": self.index,
            "line": self.part.line,
            "text": self.part.text,
            "voice": voice,
            "speed": self.part.speed,
            "seed": self.take.seed,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "pause_after": self.part.pause_after,
            "heard": self.take.heard,
            "ok": None if check is None else self.status != MISMATCH,
            "status": self.status,
            "wer": None if check is None else round(check.wer, 4),
            "differences": [] if check is None else [d.to_dict() for d in check.differences],
            "takes": self.takes,
        }


class Listener:
    """Hears a take: resampled to 16 kHz and transcribed by a Whisper Transcriber with its default decoding
    (deterministic: its fallback temperatures are seeded), told the voice's language when the model is
    multilingual. The expected text is never given as a prompt: the listener must not be told what to hear."""

    def __init__(self, transcriber: Any):
        self.transcriber = transcriber

    def hear(self, audio: np.ndarray, rate: int, language: str | None = None) -> str:
        import soxr

        samples = soxr.resample(np.ascontiguousarray(audio, dtype=np.float32), rate, ASR_RATE, quality="HQ")
        options: dict[str, Any] = {}
        code = (language or "").replace("-", "_").split("_")[0].lower()
        if getattr(self.transcriber, "multilingual", False) and code in self.transcriber.languages:
            options["language"] = code
        return self.transcriber.transcribe(samples.astype(np.float32), **options).text.strip()


@dataclass
class Voiceover:
    audio: np.ndarray  # (N,) float32
    sample_rate: int
    parts: list[SpokenPart]
    voices: dict[int, str]  # part index -> the id of the voice that spoke it

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def checked(self) -> bool:
        return any(p.take.check is not None for p in self.parts)

    @property
    def ok(self) -> bool | None:
        """Every part heard within tolerance; None when nothing was checked."""
        return all(p.status != MISMATCH for p in self.parts) if self.checked else None

    def timing(self, audio_name: str, **about: Any) -> dict[str, Any]:
        """The timing sidecar's content (docs/cli.md); `about` adds fields such as model names."""
        return {
            "audio": audio_name,
            "sample_rate": self.sample_rate,
            "duration": round(self.duration, 3),
            **about,
            "checked": self.checked,
            "ok": self.ok,
            "parts": [p.to_dict(self.voices[p.index]) for p in self.parts],
        }


def speak_part(
    synthesizer: Any,
    part: Part,
    index: int,
    listener: Listener | None,
    reroll: int = 0,
    max_wer: float = 0.0,
) -> SpokenPart:
    """One part: takes until one passes (or reroll + 1 were tried), keeping the best."""
    language = synthesizer.voice(part.voice).language
    takes: list[Take] = []
    for k in range(reroll + 1):
        speech = synthesizer.synthesize(part.text, part.voice, part.speed, part.seed + k)
        take = Take(part.seed + k, speech.audio)
        if listener is not None:
            take.heard = listener.hear(speech.audio, speech.sample_rate, language)
            take.check = compare(part.text, take.heard)
        takes.append(take)
        if status_of(take.check, max_wer) != MISMATCH:
            break
    best = best_take(takes)
    return SpokenPart(index, part, best, len(takes), status_of(best.check, max_wer))


def make_voiceover(
    synthesizer: Any,
    parts: Sequence[Part],
    listener: Listener | None = None,
    reroll: int = 0,
    max_wer: float = 0.0,
    on_part: Callable[[SpokenPart, int], None] | None = None,
) -> Voiceover:
    """Every part spoken (and heard), joined with the pauses; on_part(spoken, total) after each."""
    rate = int(synthesizer.sample_rate)
    pieces: list[np.ndarray] = []
    spoken: list[SpokenPart] = []
    voices: dict[int, str] = {}
    at = 0  # samples so far
    for index, part in enumerate(parts, 1):
        result = speak_part(synthesizer, part, index, listener, reroll, max_wer)
        voices[index] = synthesizer.voice(part.voice).id
        audio = np.asarray(result.take.audio, dtype=np.float32)
        result.start, result.end = at / rate, (at + len(audio)) / rate
        pieces.append(audio)
        at += len(audio)
        if index < len(parts):
            gap = np.zeros(round(part.pause_after * rate), dtype=np.float32)
            pieces.append(gap)
            at += len(gap)
        spoken.append(result)
        if on_part is not None:
            on_part(result, len(parts))
    audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return Voiceover(audio, rate, spoken, voices)


def write_wav(path: Path, audio: np.ndarray, rate: int) -> None:
    """16-bit PCM mono WAV, written beside `path` and renamed into place: never half a file."""
    import soundfile

    def write(temp: str) -> None:
        soundfile.write(temp, np.clip(audio, -1.0, 1.0), rate, subtype="PCM_16", format="WAV")

    _atomically(path, write)


def write_json(path: Path, data: dict[str, Any]) -> None:
    def write(temp: str) -> None:
        Path(temp).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    _atomically(path, write)


def _atomically(path: Path, write: Callable[[str], None]) -> None:
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
