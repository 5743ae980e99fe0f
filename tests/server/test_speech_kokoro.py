"""/v1/audio/speech and /v1/audio/voices with a Kokoro model (the tiny random one, tests/data/tiny_kokoro)
registered by `serve --tts-model`: the voices list with each voice's language, speech at Kokoro's 24 kHz, the
openai SDK unmodified, an unknown voice a 400 listing the voices, and a failing request leaving the server
serving."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest

from blazr.server.app import create_app
from tests.server.conftest import run_live_server, server_settings

soundfile = pytest.importorskip("soundfile")
openai = pytest.importorskip("openai")
pytest.importorskip("misaki")

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_kokoro"


@pytest.fixture(scope="module")
def server():
    app = create_app(server_settings(request_logging=False), model=None, tts_models={"kokoro": TINY})
    with run_live_server(app) as srv:
        yield srv


def test_voices_list_kokoros_packs_with_their_language(server):
    r = httpx.get(server.url + "/v1/audio/voices", params={"model": "kokoro"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json() == {"object": "list", "data": [{"id": "tiny", "name": "tiny", "language": "en-us"}]}


def test_speech_at_kokoros_rate_through_the_sdk(server):
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    data = sdk.audio.speech.create(
        model="kokoro", voice="alloy", input="Hello there. Bye.", response_format="wav"
    )
    audio, rate = soundfile.read(io.BytesIO(data.content), dtype="float32")
    assert rate == 24000 and len(audio) > 0


def test_unknown_voice_is_a_400_listing_the_voices_and_the_server_goes_on(server):
    r = httpx.post(server.url + "/v1/audio/speech", json={"model": "kokoro", "input": "Hi.", "voice": "af_x"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "voice" and "this model's voices: tiny" in error["message"]
    ok = httpx.post(
        server.url + "/v1/audio/speech", json={"model": "kokoro", "input": "Hi.", "voice": "tiny"}
    )
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("audio/")
