"""Disaggregated prefill and decode (`blazr disagg`) on the local cluster of tests/distributed/conftest.py: its head
is labelled a prefill node, its decode node joined with `blazr disagg --role decode`. Prompts run on the prefill replica,
their KV rows go through Ray's object store to the decode replica, which generates: greedy output equals one
process's, for the tiny model and the real SmolLM2, and after many requests (some abandoned mid-stream) no KV
block or hand-off slot is left held on either side."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from blazr.server.app import create_app
from tests.distributed.conftest import BLAZR, NEEDS_RAY, TOKEN, complete, in_parallel, replicas, smollm2_chats
from tests.server.conftest import run_live_server, server_settings

pytestmark = NEEDS_RAY


def disagg_loader(ray):
    from blazr.distributed.swarm_model import DECODE_RESOURCE, PREFILL_RESOURCE, Placement, swarm_loader

    prefill = Placement(1, 1, PREFILL_RESOURCE)
    return swarm_loader(ray, Placement(1, 1, DECODE_RESOURCE, prefill=prefill))


@pytest.fixture(scope="module")
def disagg(cluster, tiny_dir):
    app = create_app(server_settings(), model="tiny", model_dir=tiny_dir, loader=disagg_loader(cluster.ray))
    with run_live_server(app, timeout=120) as server:
        assert app.extensions["blazr"].models.default_error is None
        yield server


def test_the_replicas_run_on_their_roles_nodes(cluster, disagg):
    ring = replicas(disagg)
    decode_pid, prefill_pid = ring.info[0]["pid"], ring.prefill.info[0]["pid"]
    assert decode_pid != prefill_pid
    nodes = {n["NodeID"]: n["Resources"] for n in cluster.ray.nodes() if n["Alive"]}
    assert sum("blazr_prefill" in r for r in nodes.values()) == 1
    assert sum("blazr_decode" in r for r in nodes.values()) == 1


def test_greedy_output_through_prefill_and_decode_equals_one_process(disagg, local_tiny):
    # prompts from under one block (nothing to hand over) to several blocks
    prompts = [(f"request {i}: " + "a tale of two workers " * i,) for i in range(8)]
    handed_before = replicas(disagg).prefill.handed_tokens
    through = in_parallel(lambda p: complete(disagg, p)["choices"][0]["text"], prompts)
    alone = [complete(local_tiny, p)["choices"][0]["text"] for (p,) in prompts]
    assert through == alone
    assert replicas(disagg).prefill.handed_tokens - handed_before >= 16 * 20  # whole blocks went over


def test_the_decode_side_reuses_the_handed_blocks(disagg):
    prompt = "a prompt of several blocks that the prefill replica computes " * 3
    usage = complete(disagg, prompt)["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 16 * (usage["prompt_tokens"] // 16) - 16


def test_metrics_report_the_handed_over_tokens_and_their_time(disagg):
    complete(disagg, "one more prompt to hand over from prefill to decode")
    text = httpx.get(f"{disagg.url}/metrics", timeout=30).text
    values = {
        line.split("{")[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("blazr_kv_handoff_")
    }
    assert values["blazr_kv_handoff_tokens"] >= 48
    assert 0 < values["blazr_kv_handoff_seconds"] < 60


def test_no_block_or_slot_is_left_held_after_finished_and_abandoned_requests(disagg):
    ring = replicas(disagg)
    body = {"model": "tiny", "max_tokens": 200, "temperature": 0, "stream": True, "ignore_eos": True}

    def abandon(i):
        prompt = f"abandoned stream {i} " * (3 + i)
        with httpx.stream(
            "POST", f"{disagg.url}/v1/completions", json=body | {"prompt": prompt}, timeout=60
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    return  # leaves after the first chunk: the router aborts the decode request

    in_parallel(abandon, [(i,) for i in range(6)])
    in_parallel(lambda p: complete(disagg, p), [(f"finished {i} " * 9,) for i in range(6)])
    deadline = time.monotonic() + 30
    while True:
        sides = [*ring.handles, *ring.prefill.handles]
        counts = [ring.ray.get(handle.counts.remote()) for handle in sides]
        if all(c["kv_blocks_used"] == 0 and c["slots"] == 0 and c["running"] == 0 for c in counts):
            break
        assert time.monotonic() < deadline, counts
        time.sleep(0.2)


def test_smollm2_greedy_chats_through_prefill_and_decode_equal_one_process(
    cluster, smollm2_dir, local_smollm2_chats
):
    loader = disagg_loader(cluster.ray)
    app = create_app(server_settings(), model="smollm2", model_dir=smollm2_dir, loader=loader)
    with run_live_server(app, timeout=180) as server:
        through = smollm2_chats(server)
        assert replicas(server).prefill.handed_tokens > 0
    assert through == local_smollm2_chats


@pytest.mark.parametrize(
    "args, says",
    [
        (["--role", "leader", "--token", TOKEN], "--role must be one of router, prefill, decode"),
        (["--role", "prefill", "--token", TOKEN], "--router HOST:PORT is required for a prefill worker"),
        (["--role", "decode", "--token", TOKEN, "--router", "x"], "--router must be HOST:PORT"),
        (["--role", "router", "--token", TOKEN, "--cluster-port", "12000"], "outside 10002-19999"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args, says):
    run = subprocess.run([*BLAZR, "disagg", *args], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert says in run.stderr
