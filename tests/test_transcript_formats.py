"""Transcript -> text formats (blazr/tasks/transcript_formats.py): exact srt, vtt, text, json, verbose_json and
words output for a hand-made transcript, so a change in any byte shows here."""

from __future__ import annotations

import json

import pytest

from blazr.tasks.transcript import Segment, Transcript, Word
from blazr.tasks.transcript_formats import (
    FORMATS,
    SUFFIXES,
    language_code,
    language_name,
    render,
    timestamp,
)


def segment(i: int, start: float, end: float, text: str, words: list[Word] | None = None) -> Segment:
    return Segment(
        id=i,
        seek=0 if start < 30 else 3000,
        start=start,
        end=end,
        text=text,
        tokens=[50364 + i, 1000 + i, 50414],
        temperature=0.0,
        avg_logprob=-0.25,
        compression_ratio=1.5,
        no_speech_prob=0.01,
        words=words or [],
    )


@pytest.fixture
def transcript() -> Transcript:
    return Transcript(
        text=" Hello world. It's a --> test.",
        language="en",
        duration=3725.4,
        segments=[
            segment(
                0,
                0.0,
                1.5,
                " Hello world.",
                [Word(" Hello", 0.0, 0.62, 0.91), Word(" world.", 0.62, 1.5, 0.8)],
            ),
            segment(1, 1.5, 1.5, " "),  # an empty segment: no cue
            segment(2, 3661.0016, 3725.4, " It's a --> test.", [Word(" It's", 3661.0, 3661.5, 0.55556)]),
        ],
    )


def test_timestamps_round_to_milliseconds():
    assert timestamp(0) == "00:00:00.000"
    assert timestamp(3661.0015, ",") == "01:01:01,002"
    assert timestamp(59.9999) == "00:01:00.000"
    assert timestamp(-0.01) == "00:00:00.000"
    assert timestamp(36000) == "10:00:00.000"


def test_srt(transcript):
    assert render(transcript, "srt") == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello world.\n\n"
        "2\n01:01:01,002 --> 01:02:05,400\nIt's a -> test.\n\n"
    )


def test_vtt(transcript):
    assert render(transcript, "vtt") == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:01.500\nHello world.\n\n"
        "01:01:01.002 --> 01:02:05.400\nIt's a -> test.\n\n"
    )


def test_text_and_json(transcript):
    assert render(transcript, "txt") == render(transcript, "text") == "Hello world. It's a --> test.\n"
    assert render(transcript, "json") == '{"text": "Hello world. It\'s a --> test."}'


def test_verbose_json_segments(transcript):
    body = json.loads(render(transcript, "verbose_json"))
    assert body == {
        "task": "transcribe",
        "language": "english",
        "duration": 3725.4,
        "text": "Hello world. It's a --> test.",
        "segments": [
            {
                "id": s.id,
                "seek": s.seek,
                "start": round(s.start, 3),
                "end": s.end,
                "text": s.text,
                "tokens": s.tokens,
                "temperature": 0.0,
                "avg_logprob": -0.25,
                "compression_ratio": 1.5,
                "no_speech_prob": 0.01,
            }
            for s in transcript.segments
        ],
        "usage": {"type": "duration", "seconds": 3726},
    }
    assert body["segments"][2]["start"] == 3661.002


def test_verbose_json_words_only(transcript):
    body = json.loads(render(transcript, "verbose_json", task="translate", words=True, segments=False))
    assert body["task"] == "translate" and "segments" not in body
    assert body["words"] == [
        {"word": "Hello", "start": 0.0, "end": 0.62},
        {"word": "world.", "start": 0.62, "end": 1.5},
        {"word": "It's", "start": 3661.0, "end": 3661.5},
    ]


def test_verbose_json_is_what_the_openai_sdk_parses(transcript):
    verbose = pytest.importorskip("openai.types.audio.transcription_verbose")
    body = json.loads(render(transcript, "verbose_json", words=True))
    parsed = verbose.TranscriptionVerbose.model_validate(body)
    assert parsed.language == "english" and len(parsed.segments) == 3 and len(parsed.words) == 3
    assert parsed.usage.seconds == 3726


def test_words_file_is_json_lines(transcript):
    assert render(transcript, "words") == (
        '{"word": "Hello", "start": 0.0, "end": 0.62, "probability": 0.91}\n'
        '{"word": "world.", "start": 0.62, "end": 1.5, "probability": 0.8}\n'
        '{"word": "It\'s", "start": 3661.0, "end": 3661.5, "probability": 0.5556}\n'
    )


def test_non_ascii_text_stays_readable():
    t = Transcript(text=" Ça va?", language="fr", duration=1.0, segments=[segment(0, 0, 1, " Ça va?")])
    assert render(t, "json") == '{"text": "Ça va?"}'
    assert json.loads(render(t, "verbose_json"))["language"] == "french"
    assert "Ça va?" in render(t, "verbose_json")


def test_empty_transcript():
    t = Transcript(text="", language="en", duration=0.0)
    assert render(t, "srt") == "" and render(t, "vtt") == "WEBVTT\n\n" and render(t, "words") == ""
    assert render(t, "text") == "\n" and render(t, "json") == '{"text": ""}'


def test_every_format_has_a_suffix_and_unknown_ones_fail(transcript):
    assert set(SUFFIXES) == set(FORMATS)
    with pytest.raises(ValueError, match="unknown transcript format 'docx'"):
        render(transcript, "docx")


def test_language_codes_and_names():
    assert language_code("en") == language_code("English") == "en"
    assert language_code("mandarin") == "zh" and language_code("Haitian Creole") == "ht"
    assert language_code("klingon") is None
    assert language_name("yue") == "cantonese" and language_name("xx") == "xx"
