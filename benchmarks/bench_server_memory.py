"""Server memory under load: peak RSS of `blazr serve` against llama.cpp's own server (llama-server) on the same
GGUF, with the same context per sequence and the same number of parallel sequences, in one run.

Each server gets `--clients` concurrent streaming chats (greedy, one story prompt each, `--tokens` tokens with
the end-of-text tokens banned so every chat runs to its length); the process's RSS is sampled every 0.1 s from
/proc while they run, and its high-water mark (VmHWM, which includes loading) is read at the end.

    python benchmarks/bench_server_memory.py --llama-server PATH/TO/llama-server [--clients 16] [--tokens 512]
        [--ctx 1024] [--threads 2]

llama-server runs with `-c clients*ctx -np clients` (its context is shared by its slots) and its default f16 KV
cache; blazr with `--num-ctx ctx --max-concurrent-requests clients` and its default KV cache (`auto`: float16
for this packed file, as the CPU rounds its activations to int8; `--blazr-kv-cache-type f32` for float32).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import BANNED, MODEL, PROMPTS, serving, thread_env  # noqa: E402


def _status(pid: int, field: str) -> int:
    """A /proc/<pid>/status field in bytes (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


async def one_chat(client: httpx.AsyncClient, url: str, model: str, prompt: str, tokens: int) -> int:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "logit_bias": BANNED,
    }
    chunks = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line.strip() != "data: [DONE]":
                event = json.loads(line[6:])
                chunks += any((c.get("delta") or {}).get("content") for c in event.get("choices") or [])
    return chunks


async def load(url: str, model: str, pid: int, clients: int, tokens: int) -> dict:
    peak, stop = 0, False

    async def sample() -> None:
        nonlocal peak
        while not stop:
            peak = max(peak, _status(pid, "VmRSS"))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=1800, limits=httpx.Limits(max_connections=clients + 4)) as client:
        chunks = await asyncio.gather(
            *(one_chat(client, url, model, PROMPTS[i], tokens) for i in range(clients))
        )
    wall = time.perf_counter() - start
    stop = True
    await sampler
    return {
        "peak_rss_mib": peak / 2**20,
        "hwm_mib": _status(pid, "VmHWM") / 2**20,
        "wall_s": wall,
        "chunks": sum(chunks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--llama-server", required=True, help="llama.cpp's llama-server binary")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--ctx", type=int, default=1024, help="context per sequence")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=18531)
    parser.add_argument("--blazr-kv-cache-type", default="auto", help="blazr serve's --kv-cache-type")
    args = parser.parse_args()
    env = thread_env(args.threads)
    report = {}
    blazr_cmd = [sys.executable, "-m", "blazr", "serve", "-m", str(args.model), "--port", str(args.port)]
    blazr_cmd += ["--num-ctx", str(args.ctx), "--max-concurrent-requests", str(args.clients)]
    blazr_cmd += ["--kv-cache-type", args.blazr_kv_cache_type]
    url = f"http://127.0.0.1:{args.port}"
    with serving(blazr_cmd, url, "/health", env, timeout=300) as proc:
        idle = _status(proc.pid, "VmRSS") / 2**20
        report["blazr"] = {"idle_rss_mib": idle} | asyncio.run(
            load(url, "", proc.pid, args.clients, args.tokens)
        )
    llama_cmd = [args.llama_server, "-m", str(args.model), "-c", str(args.ctx * args.clients), "-np"]
    llama_cmd += [
        str(args.clients),
        "-t",
        str(args.threads),
        "-tb",
        str(args.threads),
        "--port",
        str(args.port + 1),
    ]
    llama_cmd += ["--host", "127.0.0.1"]
    url = f"http://127.0.0.1:{args.port + 1}"
    with serving(llama_cmd, url, "/health", env, timeout=300) as proc:
        idle = _status(proc.pid, "VmRSS") / 2**20
        report["llama.cpp"] = {"idle_rss_mib": idle} | asyncio.run(
            load(url, "", proc.pid, args.clients, args.tokens)
        )
    for name, r in report.items():
        print(
            f"{name:9s} idle {r['idle_rss_mib']:7.1f} MiB | peak under load {r['peak_rss_mib']:7.1f} MiB | "
            f"high-water {r['hwm_mib']:7.1f} MiB | {r['chunks']} chunks in {r['wall_s']:.1f} s"
        )
    ratio = report["blazr"]["hwm_mib"] / report["llama.cpp"]["hwm_mib"]
    print(f"blazr / llama.cpp peak RSS (high-water): {ratio:.2f}x")


if __name__ == "__main__":
    main()
