"""/v1/audio/transcriptions and /v1/audio/translations on tiny random Whisper checkpoints (tests/tiny_whisper.py):
every response format equals the formatter's rendering of what the Transcriber returns, models by
--asr-model name, by model-directory name and as "whisper-1", streaming events, the 400/404/413 errors naming
their field, requests run one at a time per model off the event loop, a failing request leaves the server
serving, and the openai SDK works unmodified against a real server."""

from __future__ import annotations

import asyncio
import io
import json
import threading

import numpy as np
import pytest

from blazr.server.app import create_app
from blazr.tasks.transcript_formats import CONTENT_TYPES, render
from tests.server.conftest import run_live_server, server_settings, wait_ready
from tests.test_cli_transcribe import memoized, whisper_dirs
from tests.tiny_whisper import random_audio

soundfile = pytest.importorskip("soundfile")
pytestmark = pytest.mark.anyio

SECONDS = 4.0
BOUNDARY = "blazr-test-boundary"
TRANSCRIBE, TRANSLATE = "/v1/audio/transcriptions", "/v1/audio/translations"
# temperature 1: one decoding attempt per window. The default (0) falls back through six temperatures on each
# window that fails the quality thresholds, as every window of a random model does: minutes, not seconds.
ONE_TRY = ("temperature", "1")


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    return whisper_dirs(tmp_path_factory)


def wav_bytes(seconds: float = SECONDS, seed: int = 0) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, random_audio(seconds, seed), 16000, format="WAV")
    return out.getvalue()


WAV = wav_bytes()


def wav_samples() -> np.ndarray:
    from blazr.audio import load_audio

    return load_audio(WAV, filename="talk.wav")


def reference(model_path, **options):
    """The Transcriber's own result for WAV (memoized: see tests/test_cli_transcribe.py), at the one
    temperature the requests ask for (ONE_TRY)."""
    from blazr.tasks.transcribe import Transcriber

    options.setdefault("temperature", (1.0,))

    return memoized(Transcriber.transcribe)(Transcriber.load(model_path), wav_samples(), **options)


@pytest.fixture
def quick(monkeypatch):
    from blazr.tasks.transcribe import Transcriber

    monkeypatch.setattr(Transcriber, "transcribe", memoized(Transcriber.transcribe))


@pytest.fixture
def model_dir(tmp_path, tiny_gguf, whisper):
    """tiny.gguf (a text model) and the English tiny Whisper under the catalog's name."""
    directory = tmp_path / "models"
    directory.mkdir()
    (directory / "tiny.gguf").symlink_to(tiny_gguf)
    (directory / "whisper-tiny.en").symlink_to(whisper["en"], target_is_directory=True)
    return directory


def make(model_dir, whisper, **server):
    asr = {"whisper-en": whisper["en"], "whisper-multi": whisper["multi"]}
    return create_app(
        server_settings(request_logging=False, **server), model="tiny", model_dir=model_dir, asr_models=asr
    )


@pytest.fixture
async def app(model_dir, whisper, quick):
    app = make(model_dir, whisper)
    await app.startup()
    await wait_ready(app)
    yield app
    await app.shutdown()


@pytest.fixture
def client(app):
    return app.test_client()


def multipart(fields=(), file=("talk.wav", WAV)) -> tuple[bytes, dict]:
    """A multipart/form-data body: `fields` as (name, value) pairs (names may repeat) and the `file` part."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields
    ]
    if file is not None:
        name, data = file
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        )
        parts.append(head.encode() + data + b"\r\n")
    parts.append(f"--{BOUNDARY}--\r\n".encode())
    return b"".join(parts), {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


async def post(client, path=TRANSCRIBE, fields=(("model", "whisper-en"),), file=("talk.wav", WAV)):
    fields = list(fields)
    if not any(name == "temperature" for name, _ in fields):
        fields.append(ONE_TRY)
    body, headers = multipart(fields, file)
    return await client.post(path, data=body, headers=headers)


@pytest.mark.parametrize("fmt", ["json", "text", "srt", "vtt", "verbose_json"])
async def test_each_format_is_the_formatted_transcript(client, whisper, fmt):
    response = await post(client, fields=[("model", "whisper-en"), ("response_format", fmt)])
    body = await response.get_data(as_text=True)
    assert response.status_code == 200, body
    want = reference(whisper["en"])
    if fmt == "json":
        assert json.loads(body) == {"text": want.text.strip()}
    elif fmt == "verbose_json":
        got = json.loads(body)
        assert got == json.loads(render(want, "verbose_json"))
        assert "segments" in got and "words" not in got and got["language"] == "english"
    else:
        assert body == render(want, fmt)
        assert response.headers["Content-Type"] == CONTENT_TYPES[fmt]


async def test_word_and_segment_granularities(client, whisper):
    fields = [
        ("model", "whisper-en"),
        ("response_format", "verbose_json"),
        ("timestamp_granularities[]", "word"),
    ]
    words_only = await post(client, fields=fields)
    body = await words_only.get_json()
    assert words_only.status_code == 200, body
    assert "segments" not in body and set(body["words"][0]) == {"word", "start", "end"}
    both = await (await post(client, fields=fields + [("timestamp_granularities[]", "segment")])).get_json()
    assert both["words"] == body["words"] and both["segments"]
    assert (
        both["words"]
        == json.loads(render(reference(whisper["en"], word_timestamps=True), "verbose_json", words=True))[
            "words"
        ]
    )


async def test_translation_and_the_task_field(client, whisper):
    response = await post(
        client, TRANSLATE, [("model", "whisper-multi"), ("response_format", "verbose_json")]
    )
    body = await response.get_json()
    assert response.status_code == 200, body
    assert body["task"] == "translate"
    assert body["text"] == reference(whisper["multi"], task="translate").text.strip()
    fields = [("model", "whisper-multi"), ("response_format", "verbose_json"), ("task", "translate")]
    fields.append(("language", "de"))
    body = await (await post(client, fields=fields)).get_json()
    assert body["task"] == "translate" and body["language"] == "german"


async def test_model_names(app, client, whisper):
    for name in ("whisper-1", "whisper-tiny.en"):  # OpenAI's alias of the first --asr-model; a model-dir name
        response = await post(client, fields=[("model", name)])
        assert response.status_code == 200, await response.get_data(as_text=True)
    loaded = {m.name: m.task for m in app.extensions["blazr"].models.loaded()}
    # whisper-tiny.en links to whisper-en's directory: one model in memory, loaded once
    assert loaded == {"tiny.gguf": "generate", "whisper-en": "transcribe"}
    for path in ("/api/ps", "/api/tags", "/v1/models", "/health"):  # listings read every loaded model
        listing = await client.get(path)
        assert listing.status_code == 200, (path, await listing.get_data(as_text=True))
    ps = {m["name"]: m for m in (await (await client.get("/api/ps")).get_json())["models"]}
    assert "whisper" in ps["whisper-en"]["details"]["family"]


def not_audio() -> bytes:
    return b"this is a text file, not audio\n" * 40


@pytest.mark.parametrize(
    "path, fields, file, status, param",
    [
        (TRANSCRIBE, [("model", "whisper-en")], None, 400, "file"),
        (TRANSCRIBE, [("model", "whisper-en"), ("file", "talk.wav")], None, 400, "file"),
        (TRANSCRIBE, [], ("talk.wav", WAV), 400, "model"),
        (TRANSCRIBE, [("model", "no-such-model")], ("talk.wav", WAV), 404, "model"),
        (TRANSCRIBE, [("model", "tiny")], ("talk.wav", WAV), 400, "model"),
        (TRANSCRIBE, [("model", "whisper-en")], ("talk.wav", not_audio()), 400, "file"),
        (TRANSCRIBE, [("model", "whisper-en")], ("talk.wav", b""), 400, "file"),
        (TRANSCRIBE, [("model", "whisper-en")], ("talk.wav", WAV[:60]), 400, "file"),
        (
            TRANSCRIBE,
            [("model", "whisper-en"), ("response_format", "docx")],
            ("a.wav", WAV),
            400,
            "response_format",
        ),
        (TRANSCRIBE, [("model", "whisper-en"), ("temperature", "2")], ("a.wav", WAV), 400, "temperature"),
        (TRANSCRIBE, [("model", "whisper-en"), ("temperature", "hot")], ("a.wav", WAV), 400, "temperature"),
        (
            TRANSCRIBE,
            [
                ("model", "whisper-en"),
                ("response_format", "verbose_json"),
                ("timestamp_granularities[]", "char"),
            ],
            ("a.wav", WAV),
            400,
            "timestamp_granularities",
        ),
        (
            TRANSCRIBE,
            [("model", "whisper-en"), ("timestamp_granularities[]", "word")],
            ("a.wav", WAV),
            400,
            "timestamp_granularities",
        ),
        (TRANSCRIBE, [("model", "whisper-en"), ("language", "klingon")], ("a.wav", WAV), 400, "language"),
        (TRANSCRIBE, [("model", "whisper-en"), ("language", "de")], ("a.wav", WAV), 400, "language"),
        (TRANSCRIBE, [("model", "whisper-en"), ("task", "translate")], ("a.wav", WAV), 400, "task"),
        (TRANSCRIBE, [("model", "whisper-en"), ("task", "summarize")], ("a.wav", WAV), 400, "task"),
        (TRANSLATE, [("model", "whisper-en")], ("a.wav", WAV), 400, "model"),
        (
            TRANSCRIBE,
            [("model", "whisper-en"), ("stream", "true"), ("response_format", "srt")],
            ("a.wav", WAV),
            400,
            "stream",
        ),
        (TRANSCRIBE, [("model", "whisper-en"), ("stream", "maybe")], ("a.wav", WAV), 400, "stream"),
    ],
)
async def test_errors_name_the_field(client, path, fields, file, status, param):
    response = await post(client, path, fields, file)
    body = await response.get_json()
    assert response.status_code == status, body
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["param"] == param, (
        body
    )


async def test_a_json_body_is_told_to_send_multipart(client):
    response = await client.post(TRANSCRIBE, json={"model": "whisper-en", "file": "talk.wav"})
    error = (await response.get_json())["error"]
    assert response.status_code == 400 and error["param"] == "file" and "multipart" in error["message"]


async def test_uploads_up_to_25_mb_pass_the_general_body_limit(client):
    big = b"\0" * (12 * 1024 * 1024)  # over the 10 MiB JSON limit, under the 25 MiB audio limit
    response = await post(client, fields=[("model", "no-such-model")], file=("big.wav", big))
    assert response.status_code == 404  # reached the route: the model lookup answered, not the body limit
    chat = await client.post(
        "/v1/chat/completions",
        data=b"{" + b" " * len(big) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert chat.status_code == 413  # other routes keep theirs
    huge = await post(client, fields=[("model", "whisper-en")], file=("huge.wav", b"\0" * (26 * 1024 * 1024)))
    body = await huge.get_json()
    assert huge.status_code == 413 and body["error"]["type"] == "invalid_request_error", body
    assert str(25 * 1024 * 1024) in body["error"]["message"]


async def test_stream_sends_deltas_then_done(client, whisper):
    response = await post(client, fields=[("model", "whisper-en"), ("stream", "true")])
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in (await response.get_data(as_text=True)).split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line)
        if lines:
            data = json.loads(lines["data"])
            assert lines["event"] == data["type"]
            events.append(data)
    want = reference(whisper["en"])
    assert [e["type"] for e in events] == ["transcript.text.delta"] * len(want.segments) + [
        "transcript.text.done"
    ]
    assert "".join(e["delta"] for e in events[:-1]) == want.text
    assert events[-1]["text"] == want.text.strip()


async def test_concurrent_requests_share_decoding_rounds(app, client, whisper):
    """Three requests in flight at once: the model's worker decodes their windows together (one batch per
    round), and each gets what it would alone."""
    rounds = []
    assert (await post(client)).status_code == 200
    model = next(m for m in app.extensions["blazr"].models.loaded() if m.name == "whisper-en")
    original = model.llm.run_batch

    def counting(runs, **kw):
        rounds.append(len(runs))
        return original(runs, **kw)

    model.llm.run_batch = counting
    try:
        replies = await asyncio.gather(*(post(client, fields=[("model", "whisper-en")]) for _ in range(3)))
    finally:
        model.llm.run_batch = original
    want = reference(whisper["en"]).text
    assert [(await r.get_json())["text"] for r in replies] == [want] * 3
    assert max(rounds) > 1  # at least one round held more than one request


async def test_a_failing_request_leaves_the_server_serving(app, client):
    assert (await post(client)).status_code == 200
    model = next(m for m in app.extensions["blazr"].models.loaded() if m.name == "whisper-en")
    original = model.llm.run_batch
    model.llm.run_batch = lambda *a, **k: 1 / 0  # a failing decode round
    broken = await post(client)
    assert broken.status_code == 500 and (await broken.get_json())["error"]["type"] == "server_error"
    streamed = await post(client, fields=[("model", "whisper-en"), ("stream", "true")])
    assert '"server_error"' in await streamed.get_data(as_text=True)  # an error event ends the stream
    model.llm.run_batch = original
    assert (await post(client)).status_code == 200


async def test_decoding_runs_on_one_thread_off_the_event_loop(app, client):
    assert (await post(client)).status_code == 200
    model = next(m for m in app.extensions["blazr"].models.loaded() if m.name == "whisper-en")
    original, running, seen = model.llm.run_batch, [], []
    loop_thread = threading.get_ident()

    def tracked(*args, **kwargs):
        running.append(1)
        seen.append((len(running), threading.get_ident()))
        try:
            return original(*args, **kwargs)
        finally:
            running.pop()

    model.llm.run_batch = tracked
    try:
        replies = await asyncio.gather(*(post(client) for _ in range(4)))
    finally:
        model.llm.run_batch = original
    assert [r.status_code for r in replies] == [200] * 4
    assert seen and all(n == 1 and thread != loop_thread for n, thread in seen)
    assert len({thread for _, thread in seen}) == 1
    assert app.extensions["blazr"].models.admission.in_flight == 0 and model.active == 0


async def test_openapi_describes_the_multipart_routes(client):
    spec = await (await client.get("/openapi.json")).get_json()
    for path in (TRANSCRIBE, TRANSLATE):
        operation = spec["paths"][path]["post"]
        assert "file" in operation["requestBody"]["content"]["multipart/form-data"]["schema"]["required"]
        assert {"application/json", "text/vtt; charset=utf-8"} <= set(
            operation["responses"]["200"]["content"]
        )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks its own translations.create so
def test_openai_sdk(model_dir, whisper, quick, tmp_path):
    openai = pytest.importorskip("openai")
    wav = tmp_path / "talk.wav"
    wav.write_bytes(WAV)
    want = reference(whisper["en"])
    with run_live_server(make(model_dir, whisper)) as server:
        sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        with open(wav, "rb") as f:
            assert (
                sdk.audio.transcriptions.create(temperature=1, model="whisper-1", file=f).text
                == want.text.strip()
            )
        with open(wav, "rb") as f:
            text = sdk.audio.transcriptions.create(
                temperature=1, model="whisper-en", file=f, response_format="text"
            )
        assert text == render(want, "text")
        with open(wav, "rb") as f:
            srt = sdk.audio.transcriptions.create(
                temperature=1, model="whisper-en", file=f, response_format="srt"
            )
        assert srt == render(want, "srt")
        with open(wav, "rb") as f:
            verbose = sdk.audio.transcriptions.create(
                temperature=1,
                model="whisper-en",
                file=f,
                response_format="verbose_json",
                timestamp_granularities=["segment"],
            )
        assert verbose.language == "english" and len(verbose.segments) == len(want.segments)
        with open(wav, "rb") as f:
            events = list(
                sdk.audio.transcriptions.create(temperature=1, model="whisper-en", file=f, stream=True)
            )
        assert events[-1].type == "transcript.text.done" and events[-1].text == want.text.strip()
        with open(wav, "rb") as f:
            translated = sdk.audio.translations.create(temperature=1, model="whisper-multi", file=f)
        assert isinstance(translated.text, str)
        with pytest.raises(openai.BadRequestError) as bad:
            sdk.audio.transcriptions.create(
                temperature=1, model="whisper-en", file=("notes.wav", not_audio())
            )
        assert bad.value.body["param"] == "file"
        with pytest.raises(openai.NotFoundError):
            sdk.audio.transcriptions.create(temperature=1, model="no-such-model", file=("talk.wav", WAV))


def test_asr_model_flag_parsing(tmp_path, whisper):
    from blazr.commands.serve import parse_asr_models
    from blazr.errors import ConfigError

    assert parse_asr_models([f"a={whisper['en']}", f" b = {whisper['multi']} "]) == {
        "a": whisper["en"].resolve(),
        "b": whisper["multi"].resolve(),
    }
    for bad, phrase in (
        ([str(whisper["en"])], "NAME=PATH"),
        ([f"={whisper['en']}"], "NAME=PATH"),
        (["a=" + str(tmp_path / "missing")], "no such file"),
        ([f"a={whisper['en']}", f"a={whisper['multi']}"], "twice"),
    ):
        with pytest.raises(ConfigError, match=phrase):
            parse_asr_models(bad)


def test_temperature_field_follows_openai():
    from blazr.server.routes.audio import _temperature

    assert _temperature({}) is None and _temperature({"temperature": "0"}) is None  # the model's fallback
    assert _temperature({"temperature": "1"}) == (1.0,)
    assert _temperature({"temperature": "0.5"}) == (0.5, 0.7, 0.9)
    assert _temperature({"temperature": "0.2"}) == (0.2, 0.4, 0.6, 0.8, 1.0)
