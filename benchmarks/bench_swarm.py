"""Swarm overhead benchmark: `blazr swarm` (replicas on a local Ray cluster) against `blazr serve`, same
GGUF, same machine, one run.

On one machine a swarm cannot be faster than one process using all its cores; what this measures is what the
swarm's layers cost (the leader's router and HTTP front end, a Ray actor call per request and a streamed
object per token): for 1 and 8 concurrent streaming clients (greedy, N tokens each, end-of-text banned) the
aggregate tokens/s and the inter-token latency of

- serve: `blazr serve`, one process with all --threads;
- swarm x1: the leader and one replica with all --threads (the pure overhead of the swarm's path);
- swarm x2: two replicas with --threads/2 each (data parallel on one machine's cores).

    python benchmarks/bench_swarm.py [--tokens 64] [--clients 1,8] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time

from bench_server import MODEL, load_round, serving, thread_env

TOKEN = "bench-swarm-token-0"


def serve_cmd(model, port: int, clients: int) -> list[str]:
    cmd = [sys.executable, "-m", "blazr", "serve", "-m", str(model), "--port", str(port)]
    return cmd + ["--max-concurrent-requests", str(clients), "--num-ctx", "2048"]


def swarm_cmd(model, port: int, swarm_port: int, replicas: int, threads: int) -> list[str]:
    cmd = [sys.executable, "-m", "blazr", "swarm", "--role", "leader", "-m", str(model), "--port", str(port)]
    cmd += ["--token", TOKEN, "--swarm-port", str(swarm_port), "--num-ctx", "2048"]
    return cmd + ["--replicas", str(replicas), "--cpus-per-replica", str(threads // replicas)]


def measure(cmd: list[str], port: int, threads: int, clients: list[int], tokens: int) -> dict:
    url = f"http://127.0.0.1:{port}"
    with serving(cmd, url, "/health", thread_env(threads), timeout=300):
        return {n: asyncio.run(load_round(url, n, tokens)) for n in clients}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(MODEL))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    setups = {
        "serve": serve_cmd(args.model, 18181, max(clients)),
        "swarm x1": swarm_cmd(args.model, 18182, 29191, 1, args.threads),
        "swarm x2": swarm_cmd(args.model, 18183, 29192, 2, args.threads),
    }
    results = {}
    for name, cmd in setups.items():
        started = time.monotonic()
        results[name] = measure(cmd, int(cmd[cmd.index("--port") + 1]), args.threads, clients, args.tokens)
        print(f"{name}: measured in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(
        f"# {platform.processor() or platform.machine()}, {args.threads} threads, {args.tokens} tokens/stream"
    )
    print(f"{'setup':<10} {'clients':>7} {'tok/s':>8} {'ITL p50 ms':>11} {'TTFT p50 s':>11} {'vs serve':>9}")
    for name, rows in results.items():
        for n, row in rows.items():
            ratio = row["aggregate_tok_s"] / results["serve"][n]["aggregate_tok_s"]
            print(
                f"{name:<10} {n:>7} {row['aggregate_tok_s']:>8.1f} {row['itl_p50_ms']:>11.2f} "
                f"{row['ttft_p50_s']:>11.3f} {ratio:>8.2f}x"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
