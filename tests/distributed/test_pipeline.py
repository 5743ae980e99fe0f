"""Pipeline-parallel replicas (`blazr swarm --pipeline-stages 2`) on the local cluster of
tests/distributed/conftest.py. Each replica is stage 0 (the embeddings and the first half of the layers,
running the engine) on one node and stage 1 (the second half, the norm and the head) on another, activations
moving through Ray every step. Greedy output equals one process's, for the tiny model and the real SmolLM2;
killing a stage mid-stream ends the stream with an error and Ray brings the whole pipeline back."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from blazr.server.app import create_app
from tests.distributed.conftest import NEEDS_RAY, complete, in_parallel, replicas, smollm2_chats
from tests.server.conftest import run_live_server, server_settings

pytestmark = NEEDS_RAY


def pipeline_loader(ray, lanes: int | None = None):
    from blazr.distributed.swarm_model import Placement, swarm_loader

    return swarm_loader(ray, Placement(1, 1, stages=2, lanes=lanes))


@pytest.fixture(scope="module")
def pipeline(cluster, tiny_dir):
    """Two lanes asked for: by default stages on one machine (this cluster's nodes) get one."""
    loader = pipeline_loader(cluster.ray, lanes=2)
    app = create_app(server_settings(), model="tiny", model_dir=tiny_dir, loader=loader)
    with run_live_server(app, timeout=120) as server:
        assert app.extensions["blazr"].models.default_error is None
        yield server


def test_the_stages_run_on_two_nodes(cluster, pipeline):
    info = replicas(pipeline).info[0]
    (stage,) = info["stages"]
    assert stage["first_layer"] == 1 and stage["layers"] == 1  # the tiny model's second layer
    pids = {info["pid"], stage["pid"]}
    assert len(pids) == 2
    group = replicas(pipeline).groups[0]
    from ray.util import placement_group_table

    table = placement_group_table(group)
    assert len(set(table["bundles_to_node_id"].values())) == 2  # STRICT_SPREAD: a node per stage


def test_greedy_output_through_two_stages_equals_one_process(cluster, pipeline, local_tiny):
    """Eight prompts at once spread over the replica's two lanes (an engine per stage, each with its own batch
    in the stages): each gives one process's tokens."""
    ring = replicas(pipeline)
    assert ring.info[0]["lanes"] == 2
    served = cluster.ray.get(ring.handles[0].lanes_served.remote())
    prompts = [(f"pipeline {i}: " + "stage by stage " * i,) for i in range(8)]
    through = in_parallel(lambda p: complete(pipeline, p)["choices"][0]["text"], prompts)
    alone = [complete(local_tiny, p)["choices"][0]["text"] for (p,) in prompts]
    assert through == alone
    after = cluster.ray.get(ring.handles[0].lanes_served.remote())
    assert sum(after) - sum(served) == 8 and all(b > a for a, b in zip(served, after, strict=True))


def test_smollm2_greedy_chats_through_two_stages_equal_one_process(cluster, smollm2_dir, local_smollm2_chats):
    loader = pipeline_loader(cluster.ray)
    app = create_app(server_settings(), model="smollm2", model_dir=smollm2_dir, loader=loader)
    with run_live_server(app, timeout=180) as server:
        through = smollm2_chats(server)
        info = replicas(server).info[0]
        assert info["stages"][0]["layers"] == 15  # 30 layers, 15 a stage
        assert info["lanes"] == 1  # the default: one lane per machine, and these nodes share one
    assert through == local_smollm2_chats


def test_a_stage_killed_mid_stream_ends_the_stream_and_the_pipeline_comes_back(pipeline):
    """Runs last in this module: it restarts the replica."""
    ring = replicas(pipeline)
    before = ring.info[0]
    body = {"model": "tiny", "prompt": "go on", "max_tokens": 400, "temperature": 0, "stream": True}
    body |= {"ignore_eos": True}
    events = []
    with httpx.stream("POST", f"{pipeline.url}/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 1:
                    os.kill(before["stages"][0]["pid"], signal.SIGKILL)
    last = json.loads(events[-1] if events[-1] != "[DONE]" else events[-2])
    assert "error" in last, events[-3:]
    deadline = time.monotonic() + 120
    while not ring.live[0] or ring.info[0]["pid"] == before["pid"]:
        assert time.monotonic() < deadline, "the pipeline did not come back within 120 s"
        time.sleep(0.5)
    assert ring.info[0]["stages"][0]["pid"] != before["stages"][0]["pid"]
    assert complete(pipeline, "after the restart")["choices"][0]["text"]
