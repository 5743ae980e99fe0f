"""What a transcription returns: segments with their times, tokens and confidence, and optionally words.

The fields follow openai-whisper's `transcribe()` result (and OpenAI's verbose_json), so the formats
(srt, vtt, json, words) and the HTTP routes read one shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Word:
    word: str  # as spoken, with its leading space (" Hello")
    start: float  # seconds from the start of the audio
    end: float
    probability: float  # the mean probability of the word's tokens


@dataclass
class Segment:
    id: int
    seek: int  # the mel frame (10 ms each) of the window this segment was decoded in
    start: float  # seconds
    end: float
    text: str
    tokens: list[int]  # text and timestamp tokens, no prompt
    temperature: float  # the temperature of the attempt that was kept
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] = field(default_factory=list)


@dataclass
class Transcript:
    text: str
    language: str  # ISO 639-1 code ("en")
    duration: float  # seconds of audio
    segments: list[Segment] = field(default_factory=list)

    @property
    def words(self) -> list[Word]:
        return [w for s in self.segments for w in s.words]

    def to_dict(self) -> dict:
        return asdict(self)
