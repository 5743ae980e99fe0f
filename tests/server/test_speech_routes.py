"""/v1/audio/speech and /v1/audio/voices on the catalog's Piper voice (piper-joe), through a real server: the
openai SDK unmodified (create, with_streaming_response), every response format decoding back to audio of a
plausible length that is not silent, OpenAI's SSE events, the voices list, every client mistake a 400 (404 for
an unknown model) in OpenAI's error shape naming its field, "tts-1" resolved as "whisper-1" is, a failing
request leaving the server serving, and synthesis on the voice's own thread."""

from __future__ import annotations

import base64
import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from blazr.audio.encode import PCM_RATE
from blazr.server.app import create_app
from tests.conftest import fetch_registry_model
from tests.server.conftest import run_live_server, server_settings

soundfile = pytest.importorskip("soundfile")
openai = pytest.importorskip("openai")

SPEECH = "/v1/audio/speech"
TEXT = "Hello there."  # about 0.8 s of speech
TWO = "Hello there. How are you today?"  # two sentences: two chunks
RATE = 22050  # the voice's rate: wav, flac and mp3 keep it


@pytest.fixture(scope="module")
def voice_path():
    return fetch_registry_model("piper-joe")


@pytest.fixture(scope="module")
def server(voice_path, tmp_path_factory):
    """A live server with the voice registered as "joe" (so "tts-1" means it) and a model directory holding
    it under its catalog name; the voice loads once, on the first request."""
    directory = tmp_path_factory.mktemp("models")
    (directory / "piper-joe").symlink_to(voice_path, target_is_directory=True)
    app = create_app(
        server_settings(request_logging=False, max_speech_input_chars=200),
        model=None,
        model_dir=directory,
        tts_models={"joe": voice_path},
    )
    with run_live_server(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def sdk(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(server, **body) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json=body, timeout=120)


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0, PCM_RATE
    if fmt == "aac":
        from blazr.audio import load_audio

        return load_audio(data, filename="speech.aac"), 16000
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return audio, rate


def check_speech(audio: np.ndarray, rate: int, low: float = 0.4, high: float = 2.5) -> None:
    """Audio of a plausible length for TEXT that is not silent."""
    assert low < len(audio) / rate < high, len(audio) / rate
    assert float(np.sqrt(np.mean(np.square(audio)))) > 0.02


@pytest.mark.parametrize(
    "fmt, content_type, rate",
    [
        ("mp3", "audio/mpeg", RATE),
        ("opus", "audio/opus", 24000),
        ("flac", "audio/flac", RATE),
        ("wav", "audio/wav", RATE),
        ("pcm", "audio/pcm", PCM_RATE),
        ("aac", "audio/aac", 16000),
    ],
)
def test_sdk_create_each_format(sdk, fmt, content_type, rate):
    if fmt == "aac":
        from blazr.audio.encode import ffmpeg_binary

        if ffmpeg_binary() is None:
            pytest.skip("no ffmpeg on PATH")
    response = sdk.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt)
    assert response.response.headers["content-type"] == content_type
    audio, got_rate = decode(response.content, fmt)
    assert got_rate == rate
    check_speech(audio, got_rate)


def test_default_format_is_mp3_and_wav_streams_with_unknown_length(sdk, server):
    response = sdk.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert response.response.headers["content-type"] == "audio/mpeg"
    wav = post(server, model="joe", input=TEXT, response_format="wav").content
    assert wav[:4] == b"RIFF" and wav[4:8] == b"\xff\xff\xff\xff" and wav[40:44] == b"\xff\xff\xff\xff"


def test_sdk_streaming_response(sdk):
    chunks = []
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TWO, response_format="pcm"
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers.get("transfer-encoding") == "chunked"
        for chunk in response.iter_bytes():
            chunks.append(chunk)
    audio, rate = decode(b"".join(chunks), "pcm")
    check_speech(audio, rate, 1.0, 4.0)


def test_speed_changes_the_length(server):
    def seconds(speed):
        audio, rate = decode(
            post(server, model="joe", input=TEXT, response_format="pcm", speed=speed).content, "pcm"
        )
        return len(audio) / rate

    assert seconds(2.0) < 0.75 * seconds(1.0)


def test_sse_events(server):
    response = post(server, model="tts-1", input=TWO, response_format="wav", stream_format="sse")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) >= 3
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio, rate = decode(b"".join(base64.b64decode(e["audio"]) for e in events[:-1]), "wav")
    check_speech(audio, rate, 1.0, 4.0)


def test_voices_route(server):
    for query in ("?model=joe", "?model=tts-1", ""):
        body = httpx.get(server.url + "/v1/audio/voices" + query, timeout=60).json()
        assert body == {"object": "list", "data": [{"id": "joe", "name": "piper-joe", "language": "en_US"}]}
    missing = httpx.get(server.url + "/v1/audio/voices?model=nope", timeout=60)
    assert missing.status_code == 404 and "--tts-model" in missing.json()["error"]["message"]


def test_voice_names(server):
    for voice in ("joe", "piper-joe", "cedar", {"id": "joe"}, None):
        body = {"model": "joe", "input": TEXT, "response_format": "pcm"}
        if voice is not None:
            body["voice"] = voice
        assert post(server, **body).status_code == 200, voice


@pytest.mark.parametrize(
    "body, status, param, phrase",
    [
        ({"input": ""}, 400, "input", "empty"),
        ({"input": "   "}, 400, "input", "empty"),
        ({"input": "a" * 201}, 400, "input", "limit is 200"),
        ({"input": "...?!"}, 400, "input", "nothing to speak"),
        ({"voice": "bob"}, 400, "voice", "joe"),
        ({"voice": 3}, 400, "voice", "string"),
        ({"response_format": "ogg"}, 400, "response_format", "mp3, opus, aac, flac, wav, pcm"),
        ({"speed": 0.1}, 400, "speed", "0.25"),
        ({"speed": 4.5}, 400, "speed", "4.0"),
        ({"speed": "fast"}, 400, "speed", "number"),
        ({"stream_format": "chunks"}, 400, "stream_format", "audio or sse"),
        ({"model": None}, 400, "model", "required"),
        ({"model": "no-such-voice"}, 404, "model", "--tts-model no-such-voice=PATH"),
    ],
)
def test_errors(server, body, status, param, phrase):
    response = post(server, **{"model": "joe", "input": TEXT, **body})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and phrase in error["message"]


def test_sdk_errors(sdk):
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.audio.speech.create(model="tts-1", voice="nobody", input=TEXT)
    assert bad.value.body["param"] == "voice"
    with pytest.raises(openai.NotFoundError):
        sdk.audio.speech.create(model="no-such-voice", voice="alloy", input=TEXT)


def test_aac_without_ffmpeg_is_a_400(server, monkeypatch):
    monkeypatch.setattr("blazr.audio.encode.ffmpeg_binary", lambda: None)
    response = post(server, model="joe", input=TEXT, response_format="aac")
    assert response.status_code == 400 and "ffmpeg" in response.json()["error"]["message"]


def loaded_voice(server):
    (model,) = [m for m in server.app.extensions["blazr"].models.loaded() if m.name == "joe"]
    return model


def test_a_failing_request_leaves_the_server_serving(server, monkeypatch):
    post(server, model="joe", input=TEXT, response_format="pcm")  # loaded
    net = loaded_voice(server).llm.model

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(net, "synthesize", broken)
    failed = post(server, model="joe", input=TEXT, response_format="wav")
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    monkeypatch.undo()
    assert post(server, model="joe", input=TEXT, response_format="wav").status_code == 200


def test_synthesis_runs_on_the_voice_thread_and_requests_overlap(server, monkeypatch):
    post(server, model="joe", input=TEXT, response_format="pcm")  # loaded
    net = loaded_voice(server).llm.model
    threads, original = set(), net.synthesize

    def spy(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(net, "synthesize", spy)
    texts = [TWO * 3, TEXT, TEXT]
    with ThreadPoolExecutor(3) as pool:
        responses = list(pool.map(lambda t: post(server, model="joe", input=t, response_format="pcm"), texts))
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert threads == {"blazr-speak"}
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_openai_names_mean_the_default_voice(tmp_path, voice_path):
    """ "tts-1" is the first --tts-model, else the pulled catalog voice, else a 404 that says how to get one
    (as "whisper-1" for speech recognition)."""
    from blazr.server.errors import ApiError

    def manager(model_dir, tts=None):
        app = create_app(server_settings(), model=None, model_dir=model_dir, tts_models=tts)
        return app.extensions["blazr"].models

    empty = tmp_path / "empty"
    empty.mkdir()
    assert manager(empty, {"joe": voice_path}).resolve("gpt-4o-mini-tts") == (voice_path, "joe")
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    (pulled / "piper-joe").symlink_to(voice_path, target_is_directory=True)
    assert manager(pulled).resolve("tts-1-hd") == (pulled / "piper-joe", "piper-joe")
    with pytest.raises(ApiError) as missing:
        manager(empty).resolve("tts-1")
    assert missing.value.status == 404 and "--tts-model NAME=PATH" in missing.value.message
    assert manager(empty, {"a": voice_path}).max_loaded == 2  # the voice stays loaded beside the LLM


def test_tts_model_flag_parsing(tmp_path, voice_path):
    from pathlib import Path

    from blazr.commands.serve import parse_tts_models
    from blazr.errors import ConfigError

    assert parse_tts_models([f"a={voice_path}", "b=piper-joe"]) == {
        "a": voice_path.resolve(),
        "b": Path("piper-joe"),  # a catalog name: fetched into the model directory at startup
    }
    for bad, phrase in (
        ([str(voice_path)], "NAME=PATH"),
        (["a=" + str(tmp_path / "missing")], "no such file"),
        ([f"a={voice_path}", f"a={voice_path}"], "twice"),
    ):
        with pytest.raises(ConfigError, match=phrase):
            parse_tts_models(bad)
