"""Server operations over real sockets: body limit, CORS, TLS, client disconnect, request timeout, and
SIGTERM with a stream in flight (a real `serve_app` subprocess)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from blazr.commands.serve import check_tls, collect_api_keys
from blazr.errors import ConfigError
from tests.server.conftest import add_stream_route, free_port, server_settings

REPO = Path(__file__).resolve().parents[2]


def post(srv, path: str, body: dict | bytes, headers: dict | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
    return conn.getresponse()


def sse_events(response) -> list:
    """Parse `data:` lines until [DONE] or the end of the stream."""
    events = []
    for raw in response:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            events.append("[DONE]")
            break
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
    return events


def engine_idle(model) -> bool:
    engine = model.llm.engine
    pool = getattr(engine, "pool", None) or engine.scheduler.pool
    return pool.num_free == pool.num_blocks and not engine.has_unfinished()


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_body_limit_413_with_and_without_content_length(live_server):
    with live_server(max_body_size=1000, setup=add_stream_route) as srv:
        r = post(srv, "/v1/test-stream", b"{" + b" " * 2000 + b"}")
        body = json.loads(r.read())
        assert r.status == 413 and "1000" in body["error"]["message"]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        chunks = iter([b'{"x": "' + b"a" * 800, b"b" * 800 + b'"}'])
        conn.request(
            "POST", "/v1/messages", chunks, {"Content-Type": "application/json"}, encode_chunked=True
        )
        r = conn.getresponse()
        body = json.loads(r.read())
        assert r.status == 413 and body["type"] == "error" and body["error"]["type"] == "request_too_large"


def test_cors_preflight_and_origin_list(live_server):
    with live_server(api_keys=["secret"], cors_origins='["https://ok.example"]') as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        headers = {"Origin": "https://ok.example", "Access-Control-Request-Method": "POST"}
        conn.request("OPTIONS", "/v1/models", headers=headers)
        r = conn.getresponse()
        r.read()
        assert r.status == 200 and r.getheader("Access-Control-Allow-Origin") == "https://ok.example"
        assert "x-api-key" in r.getheader("Access-Control-Allow-Headers")
        conn.request("GET", "/health", headers={"Origin": "https://evil.example"})
        r = conn.getresponse()
        r.read()
        assert r.getheader("Access-Control-Allow-Origin") is None


def make_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.skipif(
    not any(Path(p, "openssl").exists() for p in os.environ["PATH"].split(":")), reason="no openssl"
)
def test_tls_from_pem_files(live_server, tmp_path):
    cert, key = make_certificate(tmp_path)
    with live_server(certfile=str(cert), keyfile=str(key)) as srv:
        assert srv.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=context, timeout=30)
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        conn.close()
    settings = server_settings(tls_cert=str(cert))
    with pytest.raises(ConfigError, match="--tls-cert and --tls-key go together"):
        check_tls(settings)
    other_cert, _ = make_certificate(tmp_path / "other" if (tmp_path / "other").mkdir() is None else tmp_path)
    with pytest.raises(ConfigError, match="not a matching PEM pair"):
        check_tls(server_settings(tls_cert=str(other_cert), tls_key=str(key)))


def test_api_key_file(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# team keys\n\nalpha\n  beta  \n")
    settings = server_settings(api_key="gamma", api_key_file=str(keys))
    assert collect_api_keys(["delta", "alpha"], settings) == ["delta", "alpha", "gamma", "beta"]
    keys.write_text("# only comments\n")
    with pytest.raises(ConfigError, match="holds no keys"):
        collect_api_keys([], settings)


def test_client_disconnect_aborts_the_generation(live_server):
    with live_server(setup=add_stream_route) as srv:
        state = srv.app.extensions["blazr"]
        model = state.models.loaded()[0]
        r = post(srv, "/v1/test-stream", {"max_tokens": 400, "delay": 0.05})
        assert r.status == 200 and r.readline().startswith(b"data: ")
        assert model.active == 1
        r.close()  # the client goes away mid-stream
        assert wait_until(lambda: model.active == 0 and engine_idle(model)), "the sequence was not freed"
        assert state.models.admission.in_flight == 0


def test_request_timeout_ends_a_stream_with_an_error_event(live_server):
    with live_server(setup=add_stream_route, request_timeout_secs=1) as srv:
        start = time.monotonic()
        events = sse_events(post(srv, "/v1/test-stream", {"max_tokens": 400, "delay": 0.2}))
        assert time.monotonic() - start < 5
        assert events[-1]["error"]["type"] == "timeout_error"
        assert "request_timeout_secs=1" in events[-1]["error"]["message"]
        model = srv.app.extensions["blazr"].models.loaded()[0]
        assert wait_until(lambda: engine_idle(model))


def test_queue_full_over_http_is_429_with_retry_after(live_server):
    with live_server(setup=add_stream_route, max_concurrent_requests=1, max_queued_requests=0) as srv:
        first = post(srv, "/v1/test-stream", {"max_tokens": 100, "delay": 0.05})
        assert first.readline().startswith(b"data: ")
        second = post(srv, "/v1/test-stream", {"max_tokens": 4})
        body = json.loads(second.read())
        assert second.status == 429 and second.getheader("Retry-After") == "1"
        assert body["error"]["type"] == "rate_limit_error"
        first.close()


# The server subprocesses below get 180 s to turn healthy: on an empty kernel cache they compile first (see
# conftest.run_live_server).
SERVER_SCRIPT = """
import sys
from blazr.commands.serve import serve_app
from blazr.server.app import create_app
from tests.server.conftest import add_stream_route, server_settings
settings = server_settings(port=int(sys.argv[2]), shutdown_grace_secs=20)
app = create_app(settings, model="tiny", model_dir=sys.argv[1])
add_stream_route(app)
serve_app(app, settings)
"""


def test_sigterm_finishes_the_stream_in_flight_then_exits_0(tiny_model_dir):
    port = free_port()
    env = {**os.environ, "BLAZR_CONFIG": str(tiny_model_dir / "none.yaml")}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER_SCRIPT, str(tiny_model_dir), str(port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        srv = type("Srv", (), {"port": port})
        assert wait_until(lambda: _health(port) == 200, timeout=180), "the server did not start"
        r = post(srv, "/v1/test-stream", {"max_tokens": 30, "delay": 0.05})
        assert r.readline().startswith(b"data: ")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert _health(port) is None  # no longer accepting connections
        rest = sse_events(r)
        assert rest[-1] == "[DONE]" and rest[-2]["finish_reason"] == "length"
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log = proc.stdout.read().decode()
    assert "server shut down gracefully" in log, log


def _health(port: int) -> int | None:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None


def test_serve_exits_non_zero_when_its_model_does_not_load(tmp_path):
    """`blazr serve --model X` with X a checkpoint blazr cannot run stops with exit 1 and the load error, rather
    than answering /health 503 forever (a supervisor restarts or reports it)."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"]}))
    from safetensors.numpy import save_file

    save_file({"w": np.zeros((2, 2), np.float32)}, str(broken / "model.safetensors"))
    env = {**os.environ, "BLAZR_CONFIG": str(tmp_path / "none.yaml")}
    command = [sys.executable, "-m", "blazr", "serve", "--model", str(broken), "--port", str(free_port())]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "did not load" in proc.stderr and "NoSuchModelForCausalLM" in proc.stderr, proc.stderr


def test_blazr_serve_applies_an_edited_config_file(tiny_model_dir, tmp_path):
    """The real command watches BLAZR_CONFIG: an api_key added to the file is required within seconds, with no
    restart; the flags given at startup still win over the file."""
    config = tmp_path / "config.yaml"
    config.write_text("generation:\n  temperature: 0.5\n")
    port = free_port()
    env = {**os.environ, "BLAZR_CONFIG": str(config)}
    env.pop("BLAZR_API_KEY", None)
    command = [sys.executable, "-m", "blazr", "serve", "--model", "tiny", "--model-dir", str(tiny_model_dir)]
    proc = subprocess.Popen(
        command + ["--port", str(port)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert wait_until(lambda: _health(port) == 200, timeout=180), "the server did not start"
        assert _status(port, "/v1/models") == 200
        config.write_text("server:\n  api_key: k-live\n  port: 1\n")  # the --port flag keeps winning
        assert wait_until(lambda: _status(port, "/v1/models") == 401, timeout=15), "the key was not applied"
        assert _status(port, "/v1/models", {"Authorization": "Bearer k-live"}) == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log = proc.stdout.read().decode()
    assert "config: applied" in log, log


def _status(port: int, path: str, headers: dict | None = None) -> int | None:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().status
    except OSError:
        return None
