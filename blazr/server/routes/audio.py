"""POST /v1/audio/transcriptions and /v1/audio/translations (OpenAI's multipart speech-to-text) on a Whisper
model: `serve --asr-model NAME=PATH`, a Whisper model in the model directory by name, or "whisper-1" (what
OpenAI clients send) for the first --asr-model.

The upload is decoded on a worker thread (any container; the filename hints the format), then transcribed on
the model's own thread (blazr/server/transcribe_worker.py: never on the event loop), whose every round decodes
the next 30 s window of each request in flight in one batch. Responses in
OpenAI's formats (blazr/tasks/transcript_formats.py): json, text, srt, vtt, verbose_json (segments and/or
words per timestamp_granularities[]); `stream=true` sends `transcript.text.delta` per finished segment, then
`transcript.text.done`. A client that leaves stops its decoding at the next window."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

from quart import Blueprint, Response, jsonify, request

from blazr.engine.async_engine import EngineStoppedError
from blazr.errors import BlazrError
from blazr.server.errors import ApiError, api_error_from_blazr, error_body
from blazr.server.openapi import documented
from blazr.server.sse import sse_event, sse_response
from blazr.server.state import LoadedModel, current_state
from blazr.tasks.transcript_formats import CONTENT_TYPES, language_code, render, verbose_json

bp = Blueprint("audio", __name__)
log = logging.getLogger("blazr.server")

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("word", "segment")
TEMPERATURE_STEP = 0.2  # openai-whisper's fallback increment: temperature t tries t, t + 0.2, ... up to 1


@dataclass
class AudioRequest:
    """The checked multipart fields of one request."""

    model: str
    audio: bytes
    filename: str | None
    language: str | None  # ISO code
    prompt: str | None
    response_format: str
    temperature: tuple[float, ...] | None  # None: the transcriber's own default
    granularities: tuple[str, ...]
    stream: bool
    task: str  # "transcribe" | "translate"


_STRING = {"type": "string"}
FORM_SCHEMA = {
    "type": "object",
    "required": ["file", "model"],
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "model": _STRING,
        "language": _STRING,
        "prompt": _STRING,
        "response_format": {"enum": list(RESPONSE_FORMATS)},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "timestamp_granularities[]": {"type": "array", "items": {"enum": list(GRANULARITIES)}},
        "stream": {"type": "boolean"},
    },
}
TRANSCRIPTION_SCHEMA = {
    "type": "object",
    "required": ["text"],
    "properties": {
        "text": _STRING,
        "task": _STRING,
        "language": _STRING,
        "duration": {"type": "number"},
        "segments": {"type": "array", "items": {"type": "object"}},
        "words": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": "object"},
    },
}
_DOC = dict(
    request=FORM_SCHEMA,
    response=TRANSCRIPTION_SCHEMA,
    stream="text/event-stream",
    request_type="multipart/form-data",
    other_types=tuple(CONTENT_TYPES[f] for f in ("text", "srt", "vtt")),
)


@bp.post("/v1/audio/transcriptions")
@documented(**_DOC)
async def transcriptions():
    """Speech to text (OpenAI)"""
    return await _serve(await read_request(translations=False))


@bp.post("/v1/audio/translations")
@documented(**_DOC)
async def translations():
    """Speech to English text (OpenAI)"""
    return await _serve(await read_request(translations=True))


# ---- the request -------------------------------------------------------------------------------------------


async def read_request(translations: bool) -> AudioRequest:
    """The multipart fields, each checked: a bad one is a 400 naming it."""
    if request.mimetype != "multipart/form-data":
        raise ApiError(
            400,
            f"send the audio as multipart/form-data with a 'file' field (got {request.mimetype or 'no body'})",
            param="file",
        )
    form, files = await request.form, await request.files
    upload = files.get("file")
    if upload is None:
        what = "a text field, not a file" if form.get("file") is not None else "missing"
        raise ApiError(400, f"'file' is {what}: attach the audio file as the 'file' part", param="file")
    model = _text(form, "model")
    if model is None:
        raise ApiError(400, "'model' is required (a Whisper model's name, e.g. whisper-1)", param="model")
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise ApiError(
            400,
            f"'response_format' {response_format!r} is not supported; use one of {', '.join(RESPONSE_FORMATS)}",
            param="response_format",
        )
    granularities = _granularities(form, response_format)
    stream = _stream_flag(form, response_format)
    task = "translate" if translations else (_text(form, "task") or "transcribe")
    if task not in ("transcribe", "translate"):
        raise ApiError(400, f"'task' {task!r}: use transcribe or translate", param="task")
    return AudioRequest(
        model=model,
        audio=upload.read(),
        filename=upload.filename or None,
        language=_language(form),
        prompt=_text(form, "prompt"),
        response_format=response_format,
        temperature=_temperature(form),
        granularities=granularities,
        stream=stream,
        task=task,
    )


def _text(form: Any, name: str) -> str | None:
    value = form.get(name)
    return (value.strip() or None) if isinstance(value, str) else None


def _language(form: Any) -> str | None:
    value = _text(form, "language")
    if value is None:
        return None
    code = language_code(value)
    if code is None:
        raise ApiError(
            400,
            f"'language' {value!r} is not a language Whisper knows (use ISO-639-1, e.g. en)",
            param="language",
        )
    return code


def _temperature(form: Any) -> tuple[float, ...] | None:
    """OpenAI's meaning: 0 (or none) lets the model raise it on windows that fail its thresholds (the
    transcriber's default fallback); t > 0 starts there, rising by 0.2 up to 1, as openai-whisper's CLI."""
    value = _text(form, "temperature")
    if value is None:
        return None
    try:
        t = float(value)
    except ValueError:
        raise ApiError(400, f"'temperature' must be a number, got {value!r}", param="temperature") from None
    if not 0.0 <= t <= 1.0:
        raise ApiError(400, f"'temperature' must be between 0 and 1, got {value}", param="temperature")
    if t == 0.0:
        return None
    steps = math.floor((1.0 - t) / TEMPERATURE_STEP + 1e-6)  # openai-whisper: arange(t, 1 + 1e-6, 0.2)
    return tuple(round(t + i * TEMPERATURE_STEP, 6) for i in range(steps + 1))


def _granularities(form: Any, response_format: str) -> tuple[str, ...]:
    """timestamp_granularities[] as the SDKs send it (repeated fields; the bare name is accepted too)."""
    values = [
        v.strip() for v in form.getlist("timestamp_granularities[]") + form.getlist("timestamp_granularities")
    ]
    values = [v for v in values if v]
    for value in values:
        if value not in GRANULARITIES:
            raise ApiError(
                400,
                f"'timestamp_granularities[]' {value!r}: use word and/or segment",
                param="timestamp_granularities",
            )
    if values and response_format != "verbose_json":
        raise ApiError(
            400,
            "'timestamp_granularities[]' needs response_format verbose_json (the only format with timestamps "
            "per word or segment)",
            param="timestamp_granularities",
        )
    return tuple(dict.fromkeys(values))


def _stream_flag(form: Any, response_format: str) -> bool:
    value = (_text(form, "stream") or "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ApiError(400, f"'stream' must be true or false, got {value!r}", param="stream")
    stream = value in ("true", "1")
    if stream and response_format not in ("json", "text"):
        raise ApiError(
            400,
            f"'stream' sends transcript.text events, which carry no timestamps: use response_format json or "
            f"text, not {response_format}",
            param="stream",
        )
    return stream


# ---- running it ----------------------------------------------------------------------------------------------


async def _serve(req: AudioRequest) -> Response:
    model = await current_state().models.get(req.model)
    model.require("transcribe", route=request.path)
    _check_fits(model, req)
    audio = await _decode(req)
    if req.stream:
        return _stream_response(model, req, audio)
    transcript = await _start(model, req, audio)
    if req.response_format == "verbose_json":
        granular = req.granularities
        body = verbose_json(
            transcript,
            task=req.task,
            words="word" in granular,
            segments=not granular or "segment" in granular,
        )
        return jsonify(body)
    if req.response_format == "json":
        return jsonify({"text": transcript.text.strip()})
    text = render(transcript, req.response_format)
    return Response(text, status=200, content_type=CONTENT_TYPES[req.response_format])


def _check_fits(model: LoadedModel, req: AudioRequest) -> None:
    """A language the model lacks, or translation by an English-only model: a 400 before decoding anything."""
    transcriber = model.llm
    if req.language is not None and req.language not in transcriber.languages:
        raise ApiError(
            400,
            f"model '{model.name}' does not know the language {req.language!r}"
            + (" (it is English-only)" if not transcriber.multilingual else ""),
            param="language",
        )
    if req.task == "translate" and not transcriber.multilingual:
        raise ApiError(
            400,
            f"model '{model.name}' is English-only (.en): it cannot translate; use a multilingual Whisper",
            param="model" if request.path.endswith("/translations") else "task",
        )


async def _decode(req: AudioRequest):
    """The upload as 16 kHz mono samples, decoded on a worker thread (decoding an mp3 takes real CPU)."""
    from blazr.audio import load_audio

    if not req.audio:
        raise ApiError(400, f"'file' ({req.filename or 'the upload'}) is empty: 0 bytes", param="file")
    try:
        return await asyncio.to_thread(load_audio, req.audio, filename=req.filename)
    except BlazrError as error:
        raise api_error_from_blazr(error) from None


class _Abandoned(Exception):
    """Raised inside the transcriber's callbacks when the client has gone: stops decoding its audio."""


def _start(model: LoadedModel, req: AudioRequest, audio, on_segment=None) -> asyncio.Task:
    """Admit the request (429 when the queue is full), keep the model loaded while it runs, and transcribe
    on the model's worker. The bookkeeping is undone by a done-callback, which runs even if the task is
    cancelled before it starts."""
    manager = model.manager
    manager.admission.admit(0)
    model.active += 1
    task = asyncio.ensure_future(_transcribe(model, req, audio, on_segment))

    def finished(_: asyncio.Task) -> None:
        manager.admission.release(0)
        asyncio.ensure_future(manager.release(model))

    task.add_done_callback(finished)
    return task


async def _transcribe(model: LoadedModel, req: AudioRequest, audio, on_segment=None):
    gone = threading.Event()

    def check(*_: Any) -> None:
        if gone.is_set():
            raise _Abandoned()

    def segment_done(segment) -> None:
        check()
        on_segment(segment)

    kwargs: dict[str, Any] = {
        "language": req.language,
        "task": req.task,
        "initial_prompt": req.prompt,
        "word_timestamps": "word" in req.granularities,
        "progress": check,
    }
    if req.temperature is not None:
        kwargs["temperature"] = req.temperature
    if on_segment is not None:
        kwargs["on_segment"] = segment_done
    try:
        return await model.engine.transcribe(audio, **kwargs)
    except EngineStoppedError:
        raise ApiError(
            503, "the model was unloaded during the request; retry", headers={"Retry-After": "1"}
        ) from None
    finally:
        gone.set()  # a cancelled request (client gone) stops at its next window


def _stream_response(model: LoadedModel, req: AudioRequest, audio) -> Response:
    """SSE: `transcript.text.delta` per finished segment, then `transcript.text.done` with the whole text;
    an error after the headers went out is one `{"error": ...}` event, as the other OpenAI streams send it."""
    loop = asyncio.get_running_loop()
    texts: asyncio.Queue[str] = asyncio.Queue()
    # segments reach the queue before the task's result does: both are scheduled on the loop, in order
    task = _start(
        model, req, audio, lambda segment: loop.call_soon_threadsafe(texts.put_nowait, segment.text)
    )

    async def events():
        try:
            while True:
                getter = asyncio.ensure_future(texts.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield _event({"type": "transcript.text.delta", "delta": getter.result()})
                    continue
                getter.cancel()
                while not texts.empty():
                    yield _event({"type": "transcript.text.delta", "delta": texts.get_nowait()})
                transcript = task.result()
                yield _event({"type": "transcript.text.done", "text": transcript.text.strip()})
                return
        except ApiError as error:
            yield sse_event(error_body(error, "openai"))
        except BlazrError as error:
            yield sse_event(error_body(api_error_from_blazr(error), "openai"))
        except (
            Exception
        ) as error:  # a fault in decoding: this stream ends with a 500 event, the server goes on
            log.error("transcription stream failed", exc_info=error)
            message = f"internal server error ({type(error).__name__})"
            yield sse_event(error_body(ApiError(500, message, type="server_error"), "openai"))
        finally:
            if not task.done():
                task.cancel()

    return sse_response(events())


def _event(data: dict) -> bytes:
    """One event with its type also as the SSE event name (OpenAI's SDK reads `data`; raw SSE readers can
    dispatch on `event`)."""
    return sse_event(data, event=data["type"])
