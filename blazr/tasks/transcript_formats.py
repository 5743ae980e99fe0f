"""A Transcript as text: plain text, SubRip (srt), WebVTT (vtt), OpenAI's json and verbose_json, and a words
file for media pipelines. Pure functions, shared by `blazr transcribe` and the /v1/audio routes, so the CLI
and the server write byte-identical subtitles.

The words file is JSON Lines: one object {"word", "start", "end", "probability"} per spoken word, in order,
times in seconds (3 decimals). One object a line because a pipeline can read it as a stream, append to it,
cut it with `head`, and load it whole with `jq -s` or pandas' `read_json(lines=True)`; the word has no
leading space (Whisper's own words carry one).
"""

from __future__ import annotations

import json
import math

from blazr.tasks.transcript import Segment, Transcript
from blazr.tasks.whisper_vocab import language_code, language_name

# language_code / language_name live with Whisper's language table; callers of the formats get them here too
__all__ = [
    "CONTENT_TYPES",
    "FORMATS",
    "SUFFIXES",
    "json_text",
    "language_code",
    "language_name",
    "render",
    "srt",
    "text",
    "timestamp",
    "verbose_json",
    "vtt",
]

# What `format` accepts (CLI --format and the route's response_format): "txt" and "text" are the same.
FORMATS = ("txt", "text", "srt", "vtt", "json", "verbose_json", "words")
# File suffix per format for `blazr transcribe --output-dir` (talk.wav -> talk.srt, talk.words.jsonl).
SUFFIXES = {
    "txt": ".txt",
    "text": ".txt",
    "srt": ".srt",
    "vtt": ".vtt",
    "json": ".json",
    "verbose_json": ".json",
    "words": ".words.jsonl",
}
# HTTP content type per format.
CONTENT_TYPES = {
    "txt": "text/plain; charset=utf-8",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "json": "application/json",
    "verbose_json": "application/json",
    "words": "application/jsonl",
}


def render(
    transcript: Transcript,
    fmt: str,
    *,
    task: str = "transcribe",
    words: bool = False,
    segments: bool = True,
) -> str:
    """`transcript` in format `fmt` (one of FORMATS). `task`, `words` and `segments` shape verbose_json."""
    if fmt in ("txt", "text"):
        return text(transcript)
    if fmt == "srt":
        return srt(transcript)
    if fmt == "vtt":
        return vtt(transcript)
    if fmt == "json":
        return json_text(transcript)
    if fmt == "verbose_json":
        return json.dumps(
            verbose_json(transcript, task=task, words=words, segments=segments), ensure_ascii=False
        )
    if fmt == "words":
        return words_lines(transcript)
    raise ValueError(f"unknown transcript format {fmt!r}; use one of {', '.join(FORMATS)}")


def text(transcript: Transcript) -> str:
    """The whole text on one line, as OpenAI's response_format=text returns it."""
    return transcript.text.strip() + "\n"


def timestamp(seconds: float, separator: str = ".") -> str:
    """HH:MM:SS<sep>mmm (srt uses ",", vtt "."); hours always shown so every cue has one width."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def _cues(transcript: Transcript) -> list[tuple[Segment, str]]:
    """Segments with text: an empty cue would end the block early in a subtitle reader, so it is left out.
    "-->" inside the text would read as a cue timing line; openai-whisper writes it as "->" too."""
    out = []
    for segment in transcript.segments:
        line = segment.text.strip().replace("-->", "->")
        if line:
            out.append((segment, line))
    return out


def srt(transcript: Transcript) -> str:
    """SubRip: `N\\nHH:MM:SS,mmm --> HH:MM:SS,mmm\\ntext\\n\\n` per segment, numbered from 1."""
    return "".join(
        f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{line}\n\n"
        for i, (s, line) in enumerate(_cues(transcript), start=1)
    )


def vtt(transcript: Transcript) -> str:
    """WebVTT: the `WEBVTT` header, then `HH:MM:SS.mmm --> HH:MM:SS.mmm\\ntext\\n\\n` per segment."""
    return "WEBVTT\n\n" + "".join(
        f"{timestamp(s.start)} --> {timestamp(s.end)}\n{line}\n\n" for s, line in _cues(transcript)
    )


def json_text(transcript: Transcript) -> str:
    """OpenAI's response_format=json: {"text": ...}."""
    return json.dumps({"text": transcript.text.strip()}, ensure_ascii=False)


def _seconds(value: float) -> float:
    return round(float(value), 3)


def verbose_json(
    transcript: Transcript, *, task: str = "transcribe", words: bool = False, segments: bool = True
) -> dict:
    """OpenAI's verbose_json: task, language (its name), duration, text, then `segments` (unless only word
    granularity was asked, as OpenAI leaves them out then) and `words` [{word, start, end}] when asked."""
    body: dict = {
        "task": task,
        "language": language_name(transcript.language),
        "duration": _seconds(transcript.duration),
        "text": transcript.text.strip(),
    }
    if segments:
        body["segments"] = [
            {
                "id": s.id,
                "seek": s.seek,
                "start": _seconds(s.start),
                "end": _seconds(s.end),
                "text": s.text,
                "tokens": list(s.tokens),
                "temperature": float(s.temperature),
                "avg_logprob": float(s.avg_logprob),
                "compression_ratio": float(s.compression_ratio),
                "no_speech_prob": float(s.no_speech_prob),
            }
            for s in transcript.segments
        ]
    if words:
        body["words"] = [
            {"word": w.word.strip(), "start": _seconds(w.start), "end": _seconds(w.end)}
            for w in transcript.words
        ]
    # OpenAI bills audio by the second and reports it so; clients read it as optional
    body["usage"] = {"type": "duration", "seconds": math.ceil(transcript.duration)}
    return body


def words_lines(transcript: Transcript) -> str:
    """The words file: one JSON object {"word", "start", "end", "probability"} per line (see the module)."""
    return "".join(
        json.dumps(
            {
                "word": w.word.strip(),
                "start": _seconds(w.start),
                "end": _seconds(w.end),
                "probability": round(float(w.probability), 4),
            },
            ensure_ascii=False,
        )
        + "\n"
        for w in transcript.words
    )
