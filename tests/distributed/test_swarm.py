"""`blazr swarm` on the local cluster of tests/distributed/conftest.py: two replicas (one CPU each) of the tiny
model and of the real SmolLM2, spread over the nodes.

Greedy output through the replicas equals one process's; a repeated prompt goes back to the replica caching
it; killing a replica mid-stream ends that stream with an error event, later requests succeed on the other
replica and Ray brings the killed one back; a worker with the wrong token is refused; the leader command runs
end to end on a cluster of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx
import pytest

from blazr.server.app import create_app
from tests.distributed.conftest import (
    BLAZR,
    NEEDS_RAY,
    TOKEN,
    complete,
    in_parallel,
    replicas,
    smollm2_chats,
)
from tests.server.conftest import free_port, run_live_server, server_settings

pytestmark = NEEDS_RAY


@pytest.fixture(scope="module")
def swarm(cluster, tiny_dir):
    from blazr.distributed.swarm_model import Placement, swarm_loader

    loader = swarm_loader(cluster.ray, Placement(2, 1), served=tiny_dir / "tiny.gguf")
    app = create_app(server_settings(), model="tiny", model_dir=tiny_dir, loader=loader)
    with run_live_server(app, timeout=120) as server:
        assert app.extensions["blazr"].models.default_error is None
        yield server


def test_smollm2_greedy_chats_through_two_replicas_equal_one_process(
    cluster, smollm2_dir, local_smollm2_chats
):
    from blazr.distributed.swarm_model import Placement, swarm_loader

    loader = swarm_loader(cluster.ray, Placement(2, 1))
    app = create_app(server_settings(), model="smollm2", model_dir=smollm2_dir, loader=loader)
    with run_live_server(app, timeout=180) as server:
        through_swarm = smollm2_chats(server)
        assert len({info["pid"] for info in replicas(server).info}) == 2
    assert through_swarm == local_smollm2_chats
    assert all(through_swarm)


def test_greedy_output_through_two_replicas_equals_one_process(swarm, local_tiny):
    prompts = [(f"request {i}: the quick brown fox jumps {'over ' * i}the lazy dog",) for i in range(8)]
    through_swarm = in_parallel(lambda p: complete(swarm, p)["choices"][0]["text"], prompts)
    alone = [complete(local_tiny, p)["choices"][0]["text"] for (p,) in prompts]
    assert through_swarm == alone
    assert all(replicas(swarm).live)
    pids = {info["pid"] for info in replicas(swarm).info}
    assert len(pids) == 2  # two actor processes


def test_chat_stream_through_the_swarm_equals_one_process(swarm, local_tiny):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "stream me"}], "max_tokens": 10}
    body |= {"temperature": 0, "stream": True}

    def text(server):
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

    assert text(swarm) == text(local_tiny)


def test_a_repeated_prompt_lands_on_the_replica_that_caches_it(swarm):
    long_prompt = "a shared system prompt that is long enough to fill several KV blocks " * 2
    complete(swarm, long_prompt + "first question")
    complete(swarm, "an unrelated short prompt")  # least loaded: the other replica
    again = complete(swarm, long_prompt + "second question")
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64
    held = [len(h) for h in replicas(swarm).router.held]
    assert all(held), held  # both replicas were used


def test_metrics_sum_the_replicas_engines(swarm):
    text = httpx.get(f"{swarm.url}/metrics", timeout=30).text
    (line,) = [x for x in text.splitlines() if x.startswith('blazr_kv_cache_blocks{model="tiny.gguf"}')]
    per_replica = replicas(swarm).info  # both replicas size their pools alike
    assert per_replica[0]["num_ctx"] == per_replica[1]["num_ctx"]
    assert float(line.split()[-1]) > 0


def test_hidden_state_embeddings_are_refused_for_a_swarm_model(swarm):
    response = httpx.post(f"{swarm.url}/v1/embeddings", json={"model": "tiny", "input": "hi"}, timeout=30)
    assert response.status_code == 400
    assert "swarm" in response.json()["error"]["message"]


def test_another_text_model_is_refused_by_name(swarm):
    body = {"model": "other", "prompt": "hi", "max_tokens": 2}
    response = httpx.post(f"{swarm.url}/v1/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert "serves one text model, tiny.gguf" in response.json()["error"]["message"]


def test_a_replica_killed_mid_stream_ends_its_stream_with_an_error_and_comes_back(swarm):
    """Runs last in this module: it restarts a replica."""
    ring = replicas(swarm)
    body = {"model": "tiny", "prompt": "go on and on", "max_tokens": 400, "temperature": 0, "stream": True}
    body |= {"ignore_eos": True}
    for _attempt in range(3):  # the tiny model may finish before the kill lands: try again
        events, killed = [], None
        with httpx.stream("POST", f"{swarm.url}/v1/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if killed is None:
                    (busy,) = [i for i, n in enumerate(ring.in_flight) if n]
                    killed = busy, ring.info[busy]["pid"]
                    os.kill(killed[1], signal.SIGKILL)
        if '"finish_reason":"length"' not in "".join(events).replace(" ", ""):
            break
        # the stream ended before the kill landed: let the killed replica come back before killing again
        deadline = time.monotonic() + 120
        while not ring.live[killed[0]] or ring.info[killed[0]]["pid"] == killed[1]:
            assert time.monotonic() < deadline, "Ray did not restart the killed replica within 120 s"
            time.sleep(0.5)
    error = json.loads(events[-1]) if events[-1] != "[DONE]" else json.loads(events[-2])
    assert "error" in error, events[-3:]
    assert "went away" in error["error"]["message"]
    # later requests succeed on the other replica at once
    assert complete(swarm, "after the kill")["choices"][0]["text"]
    deadline = time.monotonic() + 120
    while not ring.live[killed[0]]:
        assert time.monotonic() < deadline, "Ray did not restart the killed replica within 120 s"
        time.sleep(0.5)
    assert ring.info[killed[0]]["pid"] != killed[1]
    assert complete(swarm, "after the restart")["choices"][0]["text"]


def test_a_model_missing_on_a_node_fails_the_load_naming_the_node(cluster):
    from blazr.config import Settings
    from blazr.distributed.replica_set import ReplicaSet
    from blazr.errors import ModelNotFoundError

    replicas = ReplicaSet(cluster.ray, "/no/such/model.gguf", Settings(), 1, 1)
    with pytest.raises(ModelNotFoundError, match="is not on node"):
        replicas.wait_ready(timeout=60)


def test_a_worker_with_the_wrong_token_is_refused(cluster):
    run = subprocess.run(
        [*BLAZR, "swarm", "--role", "worker", "--leader", cluster.address, "--token", "not-the-swarm-token"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "refused this worker's token" in run.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["--role", "boss", "--token", TOKEN], "--role must be one of leader, worker"),
        (["--role", "worker"], "--token"),
        (["--role", "worker", "--token", "short"], "at least 8 characters"),
        (["--role", "worker", "--token", TOKEN], "--leader HOST:PORT is required"),
        (["--role", "worker", "--token", TOKEN, "--leader", "nohost"], "--leader must be HOST:PORT"),
        (
            ["--role", "leader", "--token", TOKEN, "--pipeline-stages", "0"],
            "--pipeline-stages must be 1 or more",
        ),
        (
            ["--role", "leader", "--token", TOKEN, "--pipeline-lanes", "0"],
            "--pipeline-lanes must be 1 or more",
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args, says):
    env = {k: v for k, v in os.environ.items() if k != "BLAZR_SWARM_TOKEN"}
    run = subprocess.run([*BLAZR, "swarm", *args], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 2, run.stderr
    assert says in run.stderr


def test_the_leader_command_serves_until_sigterm(tiny_dir, tmp_path):
    """`blazr swarm --role leader` end to end: its own head node, one replica on it, the HTTP API with an API
    key, a clean exit on SIGTERM that takes the node down with it."""
    swarm_port, http_port = free_port(), free_port()
    command = [*BLAZR, "swarm", "--role", "leader", "-m", "tiny", "--model-dir", str(tiny_dir)]
    command += ["--token", TOKEN, "--swarm-port", str(swarm_port), "--port", str(http_port)]
    command += ["--replicas", "1", "--cpus-per-replica", "1", "--num-cpus", "1", "--api-key", "k-123"]
    log = (tmp_path / "leader.log").open("w")
    leader = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, HOME=str(tmp_path))
    )
    url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert leader.poll() is None, (tmp_path / "leader.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the leader was not ready within 120 s"
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        body = {"model": "tiny", "prompt": "hello", "max_tokens": 4, "temperature": 0}
        assert httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 401  # auth stays on
        headers = {"Authorization": "Bearer k-123"}
        response = httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
    finally:
        leader.send_signal(signal.SIGTERM)
        assert leader.wait(60) == 0, (tmp_path / "leader.log").read_text()[-2000:]
    with pytest.raises(OSError):
        socket_connect(swarm_port)  # the head node went with it


def socket_connect(port: int) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
