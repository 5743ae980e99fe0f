"""POST /v1/audio/speech (OpenAI's text to speech) and GET /v1/audio/voices on a Piper voice: `serve
--tts-model NAME=PATH`, a voice in the model directory by name, or "tts-1" / "tts-1-hd" / "gpt-4o-mini-tts"
(what OpenAI clients send) for the first --tts-model, else the pulled catalog voice.

The text is spoken on the voice's own thread (blazr/server/speak_worker.py: never on the event loop), a sentence
at a time, and each sentence is encoded there (blazr/audio/encode.py) and sent as soon as it is spoken: the
body streams with chunked transfer (`stream_format` "audio", the default), or as OpenAI's SSE events
(`speech.audio.delta` with base64 audio per chunk, then `speech.audio.done` with usage). Every check, and the
first sentence, runs before the response starts, so a bad request is a 400 in OpenAI's shape, never a broken
stream; a client that leaves stops its synthesis before the next sentence.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass

from quart import Blueprint, Response, jsonify, request

from blazr.audio.encode import CONTENT_TYPES, FORMATS, Encoder, open_encoder
from blazr.engine.async_engine import EngineStoppedError
from blazr.errors import BlazrError
from blazr.server import protocol
from blazr.server.errors import ApiError, api_error_from_blazr, error_body
from blazr.server.openapi import documented
from blazr.server.sse import sse_event, sse_response
from blazr.server.state import OPENAI_TTS_ALIASES, LoadedModel, current_state

bp = Blueprint("speech", __name__)
log = logging.getLogger("blazr.server")

STREAM_FORMATS = ("audio", "sse")
MIN_SPEED, MAX_SPEED = 0.25, 4.0
# OpenAI's built-in voice names: each means the model's default voice (the SDK's list is longer than the one
# blazr.tasks.speak knows)
OPENAI_VOICE_NAMES = frozenset(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)


@dataclass
class SpeechRequest:
    model: str
    input: str
    voice: str | None  # None: the model's default voice
    response_format: str
    speed: float
    stream_format: str


_STRING = {"type": "string"}
SPEECH_SCHEMA = {
    "type": "object",
    "required": ["model", "input"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "input": {"type": "string", "minLength": 1, "maxLength": 4096},
        "voice": {"anyOf": [_STRING, {"type": "object", "properties": {"id": _STRING}}]},
        "instructions": _STRING,
        "response_format": {"enum": list(FORMATS)},
        "speed": {"type": "number", "minimum": MIN_SPEED, "maximum": MAX_SPEED},
        "stream_format": {"enum": list(STREAM_FORMATS)},
    },
}
VOICES_SCHEMA = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "name", "language"],
                "properties": {"id": _STRING, "name": _STRING, "language": _STRING},
            },
        },
    },
}


@bp.post("/v1/audio/speech")
@documented(
    request=SPEECH_SCHEMA,
    stream="text/event-stream",
    other_types=tuple(dict.fromkeys(CONTENT_TYPES.values())),
    summary="Text to speech (OpenAI)",
)
async def speech():
    req = read_request(await protocol.read_json())
    model = await _speech_model(req.model)
    voice = _voice(model, req.voice)
    try:
        encoder = open_encoder(req.response_format, model.llm.sample_rate)
    except BlazrError as error:  # aac without ffmpeg
        raise ApiError(400, str(error), param="response_format") from None
    return await _respond(model, req, voice, encoder)


@bp.get("/v1/audio/voices")
@documented(
    response=VOICES_SCHEMA,
    query={"model": _STRING},
    summary="A text-to-speech model's voices",
)
async def voices():
    model = await _speech_model(request.args.get("model") or OPENAI_TTS_ALIASES[0])
    data = [{"id": v.id, "name": v.name, "language": v.language} for v in model.llm.voices]
    return jsonify({"object": "list", "data": data})


# ---- the request -------------------------------------------------------------------------------------------


def read_request(body: dict) -> SpeechRequest:
    """The JSON fields, each checked: a bad one is a 400 naming it."""
    model = protocol.get_str(body, "model", required=True)
    text = protocol.get_str(body, "input", required=True)
    limit = current_state().settings.server.max_speech_input_chars
    if len(text) > limit:
        raise ApiError(
            400,
            f"'input' has {len(text)} characters; the limit is {limit} (server.max_speech_input_chars)",
            param="input",
            code="string_above_max_length",
        )
    response_format = protocol.get_str(body, "response_format", default="mp3")
    if response_format not in FORMATS:
        raise ApiError(
            400,
            f"'response_format' {response_format!r} is not supported; use one of {', '.join(FORMATS)}",
            param="response_format",
        )
    stream_format = protocol.get_str(body, "stream_format", default="audio")
    if stream_format not in STREAM_FORMATS:
        raise ApiError(400, f"'stream_format' {stream_format!r}: use audio or sse", param="stream_format")
    speed = protocol.get_float(body, "speed", default=1.0)
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise ApiError(
            400, f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}", param="speed"
        )
    protocol.get_str(body, "instructions")  # accepted (a Piper voice cannot follow them), but a string
    return SpeechRequest(model, text, _voice_field(body), response_format, speed, stream_format)


def _voice_field(body: dict) -> str | None:
    """A voice name, or OpenAI's custom voice object {"id": ...}; absent means the default voice."""
    value = body.get("voice")
    if isinstance(value, dict):
        value = value.get("id")
        if not isinstance(value, str):
            raise ApiError(400, "'voice' as an object needs a string 'id'", param="voice")
    if value is not None and not isinstance(value, str):
        raise ApiError(400, "'voice' must be a voice name (a string)", param="voice")
    value = value.strip() if value else None
    return None if value in OPENAI_VOICE_NAMES else value or None


async def _speech_model(name: str) -> LoadedModel:
    """The loaded voice model `name`; 404 says how to register one, 400 when `name` is not a voice."""
    try:
        model = await current_state().models.get(name)
    except ApiError as error:
        if error.status != 404 or "--tts-model" in error.message:
            raise
        raise ApiError(
            404,
            f"{error.message}. Register a voice with `blazr serve --tts-model {name}=PATH` (a Piper voice's "
            f"directory or .onnx, or a catalog name such as piper-joe), or ask for tts-1 (the default voice)",
            type=error.type,
            param="model",
            code=error.code,
        ) from None
    model.require("speak", route=request.path)
    return model


def _voice(model: LoadedModel, name: str | None) -> str | None:
    try:
        return model.llm.voice(name).id
    except BlazrError as error:  # the message lists the model's voices
        raise ApiError(400, str(error), param="voice") from None


# ---- running it ----------------------------------------------------------------------------------------------


class _Speaking:
    """One request's synthesis on the model's worker: the encoded chunks it posts, the task that ends with its
    SpeechStats, and the encoder whose tail comes after the last sentence."""

    def __init__(self, model: LoadedModel, req: SpeechRequest, voice: str | None, encoder: Encoder):
        loop = asyncio.get_running_loop()
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.encoder, self.finished = encoder, False

        def on_sentence(_phonemes: str, audio) -> None:  # on the worker thread
            loop.call_soon_threadsafe(self.chunks.put_nowait, encoder.write(audio))

        # admitted like a transcription (429 when the queue is full); the model stays loaded while it runs
        manager = model.manager
        manager.admission.admit(0)
        model.active += 1
        self.task = asyncio.ensure_future(
            model.engine.speak(req.input, on_sentence, voice=voice, speed=req.speed)
        )

        def release(_: asyncio.Task) -> None:  # runs even if the task is cancelled before it starts
            manager.admission.release(0)
            asyncio.ensure_future(manager.release(model))

        self.task.add_done_callback(release)

    async def next(self) -> bytes | None:
        """The next encoded chunk; after the last sentence the encoder's tail, then None. Errors from the
        synthesis or the encoder are raised as ApiError."""
        if self.finished:
            return None
        getter = asyncio.ensure_future(self.chunks.get())
        await asyncio.wait({getter, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        if not self.chunks.empty():  # sentences reach the queue before the task's result does
            return self.chunks.get_nowait()
        try:
            self.task.result()
            tail = await asyncio.to_thread(self.encoder.close)
        except EngineStoppedError:
            raise ApiError(
                503, "the model was unloaded during the request; retry", headers={"Retry-After": "1"}
            ) from None
        except BlazrError as error:
            raise _input_error(error) from None
        self.finished = True
        return tail

    def stop(self) -> None:
        """The response ended (done, failed or the client left): the worker drops it before its next sentence."""
        if not self.task.done():
            self.task.cancel()
        if not self.finished:
            self.encoder.abort()


def _input_error(error: BlazrError) -> ApiError:
    """A library error as an ApiError; a 400 that names no field is about the text (espeak found nothing)."""
    api = api_error_from_blazr(error)
    if api.status == 400 and api.param is None:
        api.param = "input"
    return api


async def _respond(model: LoadedModel, req: SpeechRequest, voice: str | None, encoder: Encoder) -> Response:
    """Start speaking, wait for the first sentence (its errors are still a plain 400), then stream the rest."""
    speaking = _Speaking(model, req, voice, encoder)
    try:
        first = await speaking.next()
    except BaseException:
        speaking.stop()
        raise

    async def pieces():
        piece = first
        while piece is not None:
            if piece:
                yield piece
            piece = await speaking.next()

    if req.stream_format == "sse":
        return sse_response(_sse(pieces(), speaking))
    response = Response(_audio(pieces(), speaking), content_type=encoder.content_type)
    response.timeout = None  # bounded by the input's length, not Quart's send timeout
    return response


async def _audio(pieces, speaking: _Speaking):
    """The body: the file's bytes as they are encoded. An error after the headers went out can only end the
    body early (the client gets a short file); it is logged."""
    try:
        async for piece in pieces:
            yield piece
    except ApiError as error:
        log.warning("speech stream ended early: %s", error.message)
    except Exception as error:  # a fault mid-stream: this response ends, the server goes on
        log.error("speech stream failed", exc_info=error)
    finally:
        speaking.stop()


async def _sse(pieces, speaking: _Speaking):
    """OpenAI's events: `speech.audio.delta` (base64 of the file's next bytes) per chunk, then
    `speech.audio.done` with usage; an error after the headers is one `{"error": ...}` event."""
    try:
        async for piece in pieces:
            yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode("ascii")})
        yield _event({"type": "speech.audio.done", "usage": usage(speaking.task.result())})
    except ApiError as error:
        yield sse_event(error_body(error, "openai"))
    except Exception as error:
        log.error("speech stream failed", exc_info=error)
        message = f"internal server error ({type(error).__name__})"
        yield sse_event(error_body(ApiError(500, message, type="server_error"), "openai"))
    finally:
        speaking.stop()


def usage(stats) -> dict:
    """OpenAI's usage object: input tokens are the phoneme ids the voice read, output tokens its audio frames
    (256 samples, the VITS decoder's hop)."""
    output = -(-stats.samples // 256)
    total = stats.phoneme_ids + output
    return {"input_tokens": stats.phoneme_ids, "output_tokens": output, "total_tokens": total}


def _event(data: dict) -> bytes:
    """One event with its type also as the SSE event name (OpenAI's SDK reads `data`)."""
    return sse_event(data, event=data["type"])
