"""One local Ray cluster for every tests/distributed module: separate processes on loopback, as the commands
start them. The head node (as a leader's, labelled a prefill node as `blazr disagg --role prefill` labels
one), a worker joined with `blazr swarm --role worker` and a decode worker joined with `blazr disagg --role
decode`, two logical CPUs each: room for every module's replicas, which each module's servers free when they
stop. Package-scoped: the
cluster stops when the last test here ends, not with the whole session.

Ray is imported only after its token is set (blazr.distributed.ray_cluster.import_ray), so these modules skip
on `find_spec`, not importorskip."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from blazr.server.app import create_app
from tests.server.conftest import free_port, run_live_server, server_settings, write_tiny_gguf

TOKEN = "swarm-test-token-0123"
BLAZR = [sys.executable, "-m", "blazr"]
NEEDS_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")


@dataclass
class Cluster:
    ray: Any
    address: str  # the head's HOST:PORT, as workers join it


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    from blazr.distributed.ray_cluster import connect, node_command, start_node, stop_node

    port = free_port()
    address = f"127.0.0.1:{port}"
    from blazr.distributed.swarm_model import PREFILL_RESOURCE

    labels = json.dumps({PREFILL_RESOURCE: 1000})
    command = node_command(head=True, address=str(port), num_cpus=2, resources=labels)
    head = start_node(command, TOKEN, subprocess.DEVNULL)
    workers: list[subprocess.Popen] = []
    logs = tmp_path_factory.mktemp("node-logs")
    joins = {
        "worker": ["swarm", "--role", "worker", "--leader", address],
        "decode": ["disagg", "--role", "decode", "--router", address],
    }
    try:
        ray = connect(address, TOKEN, head)
        for nodes, (name, args) in enumerate(joins.items(), start=2):  # one at a time: two `ray start`s in
            log = logs / f"{name}.log"  # the same second can race on one machine
            command = [*BLAZR, *args, "--token", TOKEN, "--num-cpus", "2"]
            worker = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
            workers.append(worker)
            deadline = time.monotonic() + 60
            while len([n for n in ray.nodes() if n["Alive"]]) < nodes:
                assert worker.poll() is None, f"the {name} node exited: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"the {name} node did not join within 60 s"
                time.sleep(0.2)
        yield Cluster(ray, address)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(30)
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()
        stop_node(head)


@pytest.fixture(scope="package")
def tiny_dir(tmp_path_factory) -> Path:
    """tiny.gguf, and other.gguf: a copy, which the server counts as another model."""
    directory = tmp_path_factory.mktemp("distributed-models")
    write_tiny_gguf(directory / "tiny.gguf")
    shutil.copy(directory / "tiny.gguf", directory / "other.gguf")
    return directory


@pytest.fixture(scope="package")
def local_tiny(tiny_dir):
    """The tiny model served by one process: the reference."""
    with run_live_server(create_app(server_settings(), model="tiny", model_dir=tiny_dir)) as server:
        yield server


@pytest.fixture(scope="package")
def smollm2_dir(tmp_path_factory, smollm2_gguf) -> Path:
    directory = tmp_path_factory.mktemp("distributed-smollm2")
    (directory / "smollm2.gguf").symlink_to(smollm2_gguf)
    return directory


@pytest.fixture(scope="package")
def local_smollm2_chats(smollm2_dir) -> list[str]:
    """SmolLM2's answers to SMOLLM2_QUESTIONS from one process."""
    with run_live_server(create_app(server_settings(), model="smollm2", model_dir=smollm2_dir)) as server:
        return smollm2_chats(server)


SMOLLM2_QUESTIONS = ["What is 2+2?", "Name a colour.", "Say hello.", "Count to three."]


def smollm2_chats(server) -> list[str]:
    """Greedy answers to SMOLLM2_QUESTIONS, asked at once."""

    def chat(question):
        body = {"model": "smollm2", "messages": [{"role": "user", "content": question}]}
        body |= {"max_tokens": 12, "temperature": 0}
        response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["message"]["content"]

    return in_parallel(chat, [(q,) for q in SMOLLM2_QUESTIONS])


def replicas(server):
    """The served text model's ReplicaSet."""
    (model,) = [m for m in server.app.extensions["blazr"].models.loaded() if m.task == "generate"]
    return model.engine


def complete(server, prompt: str, max_tokens: int = 12) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def in_parallel(fn, args: list) -> list:
    """fn(*a) for each a in args on its own thread; the results in order (the first error is raised)."""
    out: list = [None] * len(args)
    errors: list[BaseException] = []

    def run(i):
        try:
            out[i] = fn(*args[i])
        except BaseException as error:  # noqa: BLE001 (re-raised on the test's thread)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors:
        raise errors[0]
    return out
