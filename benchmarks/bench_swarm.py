"""Swarm overhead benchmark: `blazr swarm` (replicas on a local Ray cluster) against `blazr serve`, same
GGUF, same machine, one run.

On one machine a swarm cannot be faster than one process using all its cores; what this measures is what the
swarm's layers cost (the leader's router and HTTP front end, a Ray actor call per request and a streamed
object per token): for 1 and 8 concurrent streaming clients (greedy, N tokens each, end-of-text banned) the
aggregate tokens/s and the inter-token latency of

- serve: `blazr serve`, one process with all --threads;
- swarm x1: the leader and one replica with all --threads (the pure overhead of the swarm's path);
- swarm x2: two replicas with --threads/2 each (data parallel on one machine's cores);
- disagg: `blazr disagg`, a router, a prefill worker and a decode worker, one replica each with all --threads
  (the prefill replica idles while the decode replica generates, so they share the cores);
- pipeline: `blazr swarm --pipeline-stages 2`, the leader's node and a worker node, one replica whose two
  stages (half the layers each) run with all --threads on their nodes, with the default number of engines
  ("lanes": one per machine, so one here, where every node is this machine); `pipeline 2 lanes` the same
  with two engines, each with its own batch in the stages, as two machines would get.

On one machine the nodes share its cores, which separate machines would not. `--pin` makes each node a
machine of its own in miniature: every process of a node is held to one core (`taskset`: the leader's node
core 0, the workers' cores 1, 0, ...), one thread per replica or stage, and `serve` runs on core 0 with one
thread: one such machine against two.

Then the KV hand-off: --handoff-prompts prompts of ~1,000 tokens through `serve` and `disagg`, one at a time:
the time to first token of each, and the router's own count of the hand-off (blazr_kv_handoff_seconds /
blazr_kv_handoff_tokens in /metrics: exporting the rows on the prefill replica plus loading them on the decode
replica) per 1,000 prompt tokens.

    python benchmarks/bench_swarm.py [--tokens 64] [--clients 1,8] [--threads 2] [--pin] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
from bench_server import MODEL, load_round, serving, thread_env

TOKEN = "bench-swarm-token-0"


def serve_cmd(model, port: int, clients: int) -> list[str]:
    cmd = [sys.executable, "-m", "blazr", "serve", "-m", str(model), "--port", str(port)]
    return cmd + ["--max-concurrent-requests", str(clients), "--num-ctx", "2048"]


def swarm_cmd(model, port: int, swarm_port: int, replicas: int, threads: int) -> list[str]:
    cmd = [sys.executable, "-m", "blazr", "swarm", "--role", "leader", "-m", str(model), "--port", str(port)]
    cmd += ["--token", TOKEN, "--swarm-port", str(swarm_port), "--num-ctx", "2048"]
    return cmd + ["--replicas", str(replicas), "--cpus-per-replica", str(threads // replicas)]


def pipeline_cmd(model, port: int, swarm_port: int, threads: int) -> list[str]:
    cmd = swarm_cmd(model, port, swarm_port, 1, threads)
    return cmd + ["--pipeline-stages", "2", "--num-cpus", str(threads)]


def disagg_cmd(model, port: int, cluster_port: int, threads: int) -> list[str]:
    cmd = [sys.executable, "-m", "blazr", "disagg", "--role", "router", "-m", str(model), "--port", str(port)]
    cmd += ["--token", TOKEN, "--cluster-port", str(cluster_port), "--num-ctx", "2048", "--num-cpus", "0"]
    return cmd + ["--cpus-per-replica", str(threads)]


def core_of(node: int) -> list[str]:
    """The command prefix holding a node's processes (and the Ray processes they start) to one core."""
    return ["taskset", "-c", str(node % (os.cpu_count() or 1))]


def numba_env(threads: int) -> dict:
    return dict(thread_env(threads), NUMBA_NUM_THREADS=str(threads))


@contextmanager
def cluster_serving(cmd: list[str], url: str, threads: int, pin: bool = False):
    """The leader (or router), then its workers once its cluster port listens (one `ray start` at a time: two
    in the same second can race on one machine), until /health answers: a prefill and a decode worker for
    `disagg`, one plain worker for a pipeline."""
    if "disagg" in cmd:
        cluster_port = int(cmd[cmd.index("--cluster-port") + 1])
        joins = [["disagg", "--role", role, "--router"] for role in ("prefill", "decode")]
    else:
        cluster_port = int(cmd[cmd.index("--swarm-port") + 1])
        joins = [["swarm", "--role", "worker", "--leader"]]
    lead = core_of(0) + cmd if pin else cmd
    procs = [
        subprocess.Popen(lead, env=numba_env(threads), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ]
    try:
        wait_until(lambda: _listening(cluster_port), 60)
        for node, join in enumerate(joins, start=1):
            worker = [sys.executable, "-m", "blazr", *join, f"127.0.0.1:{cluster_port}", "--token", TOKEN]
            worker = (core_of(node) if pin else []) + worker + ["--num-cpus", str(threads)]
            procs.append(subprocess.Popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(3)
        wait_until(lambda: _healthy(url), 300)
        yield
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_until(ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not ready within {timeout} s")
        time.sleep(0.5)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def measure(
    cmd: list[str], port: int, threads: int, clients: list[int], tokens: int, handoff: int, pin: bool
) -> dict:
    url = f"http://127.0.0.1:{port}"
    if "disagg" in cmd or "--pipeline-stages" in cmd:
        server = cluster_serving(cmd, url, threads, pin)
    else:
        server = serving(core_of(0) + cmd if pin else cmd, url, "/health", numba_env(threads), timeout=300)
    with server:
        out = {n: asyncio.run(load_round(url, n, tokens)) for n in clients}
        if handoff:
            out["handoff"] = long_prompts(url, handoff)
        return out


def long_prompts(url: str, count: int) -> dict:
    """TTFT of `count` ~1,000-token prompts, one at a time; the hand-off counters when the server has them."""
    text = " ".join(f"word{i % 97}" for i in range(400))  # ~1,000 SmolLM2 tokens
    ttft = []
    for i in range(count):
        body = {"prompt": f"{i} {text}", "max_tokens": 2, "temperature": 0, "stream": True}
        sent = time.perf_counter()
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    ttft.append(time.perf_counter() - sent)
                    break
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    counters = {
        line.split("{")[0]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("blazr_kv_handoff_")
    }
    out = {"ttft_s": sorted(ttft)[len(ttft) // 2]}
    if counters.get("blazr_kv_handoff_tokens"):
        out["handoff_s_per_1000"] = (
            1000 * counters["blazr_kv_handoff_seconds"] / counters["blazr_kv_handoff_tokens"]
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(MODEL))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--handoff-prompts", type=int, default=5)
    parser.add_argument("--setups", default="serve,swarm x1,swarm x2,disagg,pipeline,pipeline 2 lanes")
    parser.add_argument("--pin", action="store_true", help="each node on a core of its own, 1 thread each")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.pin:  # swarm x2's two replicas share the leader's node: one core here
        args.threads = 1
        args.setups = ",".join(name for name in args.setups.split(",") if name != "swarm x2")
    clients = [int(c) for c in args.clients.split(",")]
    setups = {
        "serve": serve_cmd(args.model, 18181, max(clients)),
        "swarm x1": swarm_cmd(args.model, 18182, 29191, 1, args.threads),
        "swarm x2": swarm_cmd(args.model, 18183, 29192, 2, args.threads),
        "disagg": disagg_cmd(args.model, 18184, 29193, args.threads),
        "pipeline": pipeline_cmd(args.model, 18185, 29194, args.threads),
        "pipeline 2 lanes": pipeline_cmd(args.model, 18186, 29195, args.threads) + ["--pipeline-lanes", "2"],
    }
    setups = {name: cmd for name, cmd in setups.items() if name in args.setups.split(",")}
    results = {}
    for name, cmd in setups.items():
        started = time.monotonic()
        handoff = args.handoff_prompts if name in ("serve", "disagg") else 0
        port = int(cmd[cmd.index("--port") + 1])
        results[name] = measure(cmd, port, args.threads, clients, args.tokens, handoff, args.pin)
        print(f"{name}: measured in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(
        f"# {platform.processor() or platform.machine()}, {args.threads} threads, {args.tokens} tokens/stream"
        + (", each node on one core" if args.pin else "")
    )
    print(f"{'setup':<15} {'clients':>7} {'tok/s':>8} {'ITL p50 ms':>11} {'TTFT p50 s':>11} {'vs serve':>9}")
    for name, rows in results.items():
        for n, row in rows.items():
            if n == "handoff":
                continue
            ratio = row["aggregate_tok_s"] / results["serve"][n]["aggregate_tok_s"]
            print(
                f"{name:<15} {n:>7} {row['aggregate_tok_s']:>8.1f} {row['itl_p50_ms']:>11.2f} "
                f"{row['ttft_p50_s']:>11.3f} {ratio:>8.2f}x"
            )
    for name, rows in results.items():
        if "handoff" in rows:
            h = rows["handoff"]
            extra = (
                f", hand-off {h['handoff_s_per_1000'] * 1000:.1f} ms per 1,000 tokens"
                if "handoff_s_per_1000" in h
                else ""
            )
            print(f"{name}: ~1,000-token prompt TTFT p50 {h['ttft_s']:.3f} s{extra}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
