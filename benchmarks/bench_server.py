"""Server load benchmark: `blazr serve` against llama-cpp-python's server on the same GGUF, in one run.

For 1, 8 and 32 concurrent streaming clients (greedy, fixed prompts, N tokens each, end-of-text banned so every
request generates exactly N tokens) it reports aggregate tokens/s, time to first token and inter-token latency
(p50/p99), and blazr's in-process decode rate (blazr.api, one sequence) beside its one-client HTTP decode rate:
the server-overhead ratio.

    python benchmarks/bench_server.py [--tokens 64] [--clients 1,8,32] [--threads 2] [--json out.json]

llama-cpp-python runs from its own environment (--llama-python, default .venv-bench/bin/python beside this
repo) and needs its server's Python packages (fastapi, uvicorn, sse-starlette, starlette-context,
pydantic-settings). Its server has no continuous batching: requests take turns on one model behind a lock, so
it runs with `--interrupt_requests False` (otherwise a waiting request cuts the running stream short).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
MODEL = CACHE / "blazr-test-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
BANNED = {
    "0": -100,
    "1": -100,
    "2": -100,
}  # SmolLM2's <|endoftext|>, <|im_start|>, <|im_end|>: never stop early
TOPICS = (
    "the sea", "a lighthouse", "winter", "a small robot", "the moon", "an old library", "a train journey",
    "a garden", "the desert", "a violin", "a mountain village", "the rain", "a lost key", "a clockmaker",
    "the first snow", "a river", "a market at dawn", "a paper boat", "the city at night", "a fox",
    "a forgotten letter", "the harbour", "a storm", "a bakery", "an island", "a kite", "the northern lights",
    "a bridge", "a chess game", "an orchard", "a comet", "a quiet street",
)  # fmt: skip
PROMPTS = [f"Write a short story about {topic}." for topic in TOPICS]


@dataclass
class StreamTiming:
    sent: float
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk with text
    tokens: int = 0  # from the final usage when the server sends it, else the number of text chunks


# ---- servers ---------------------------------------------------------------------------------------------


@contextmanager
def running(cmd: list[str], url: str, ready_path: str, env: dict, timeout: float = 180.0):
    """Start a server process, wait until `ready_path` answers 200, yield `url`; stopped at exit."""
    with serving(cmd, url, ready_path, env, timeout):
        yield url


@contextmanager
def serving(cmd: list[str], url: str, ready_path: str, env: dict, timeout: float = 180.0):
    """Start a server process, wait until `ready_path` answers 200, yield the process (its pid for /proc), stop
    it (SIGTERM, then kill) at exit."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited early:\n{proc.stderr.read().decode()[-3000:]}")
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server {cmd} not ready within {timeout} s")
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def thread_env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))


def blazr_server(model: Path, port: int, threads: int, max_clients: int):
    """`blazr serve` with room to decode every client at once."""
    cmd = [sys.executable, "-m", "blazr", "serve", "-m", str(model), "--port", str(port)]
    cmd += ["--max-concurrent-requests", str(max_clients), "--num-ctx", "2048"]
    return running(cmd, f"http://127.0.0.1:{port}", "/health", thread_env(threads))


def llama_server(python: str, model: Path, port: int, threads: int):
    cmd = [python, "-m", "llama_cpp.server", "--model", str(model), "--n_threads", str(threads)]
    cmd += ["--n_threads_batch", str(threads), "--n_ctx", "2048", "--port", str(port), "--host", "127.0.0.1"]
    cmd += ["--interrupt_requests", "False", "--verbose", "False"]
    return running(cmd, f"http://127.0.0.1:{port}", "/v1/models", thread_env(threads))


# ---- clients ---------------------------------------------------------------------------------------------


async def one_stream(client: httpx.AsyncClient, url: str, prompt: str, tokens: int) -> StreamTiming:
    body = {
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "logit_bias": BANNED,
        "stream_options": {"include_usage": True},
    }
    timing = StreamTiming(sent=time.perf_counter())
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line.strip() == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if any(choice.get("text") for choice in event.get("choices") or []):
                timing.chunk_times.append(time.perf_counter())
            if event.get("usage"):
                timing.tokens = event["usage"]["completion_tokens"]
    timing.tokens = timing.tokens or len(timing.chunk_times)
    return timing


async def load_round(url: str, clients: int, tokens: int) -> dict:
    """`clients` streams at once, prompt i for client i; returns aggregate and latency figures."""
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        # Warm up at this concurrency: the first batch of a new size pays one-time costs (kernel compiles).
        await asyncio.gather(*(one_stream(client, url, PROMPTS[i], 4) for i in range(clients)))
        start = time.perf_counter()
        runs = await asyncio.gather(*(one_stream(client, url, PROMPTS[i], tokens) for i in range(clients)))
        wall = time.perf_counter() - start
    return summarize(runs, wall)


def summarize(runs: list[StreamTiming], wall: float) -> dict:
    ttft = [r.chunk_times[0] - r.sent for r in runs if r.chunk_times]
    gaps = [b - a for r in runs for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    total = sum(r.tokens for r in runs)
    decode = [(r.tokens - 1) / (r.chunk_times[-1] - r.chunk_times[0]) for r in runs if len(r.chunk_times) > 1]
    return {
        "clients": len(runs),
        "tokens": total,
        "wall_s": wall,
        "aggregate_tok_s": total / wall,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_ms": percentile(gaps, 50) * 1000,
        "itl_p99_ms": percentile(gaps, 99) * 1000,
        "per_stream_decode_tok_s": statistics.median(decode) if decode else 0.0,
        "chunks_per_token": sum(len(r.chunk_times) for r in runs) / max(1, total),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# ---- in-process reference --------------------------------------------------------------------------------


class InProcess:
    """blazr.api in this process: the decode rate of one greedy sequence, same prompt and bans."""

    def __init__(self, model: Path, max_seqs: int):
        sys.path.insert(0, str(REPO))
        from blazr.api import LLM

        self.llm = LLM.load(model, num_ctx=2048, max_seqs=max_seqs)  # as the server loads it
        self.llm.generate(PROMPTS[0], max_tokens=4, temperature=0.0)  # first-run overhead

    def decode_tok_s(self, tokens: int) -> float:
        bias = {int(k): v for k, v in BANNED.items()}
        self.llm.generate(PROMPTS[0], max_tokens=tokens, temperature=0.0, logit_bias=bias)
        return self.llm.last_stats.decode_tokens_per_second


def overhead_ratio(url: str, reference: InProcess, tokens: int, runs: int) -> dict:
    """In-process and one-client HTTP decode rates, alternated `runs` times so load drift hits both alike."""
    local, http = [], []
    for _ in range(runs):
        local.append(reference.decode_tok_s(tokens))
        http.append(asyncio.run(load_round(url, 1, tokens))["per_stream_decode_tok_s"])
        print(f"  in-process {local[-1]:6.1f} tok/s | HTTP {http[-1]:6.1f} tok/s", flush=True)
    ratio = statistics.median(h / loc for h, loc in zip(http, local, strict=True))
    return {"in_process_tok_s": local, "http_tok_s": http, "ratio_median": ratio}


# ---- main ------------------------------------------------------------------------------------------------


def bench_runtime(name: str, url: str, clients: list[int], tokens: int) -> dict:
    results = {}
    for n in clients:
        results[n] = asyncio.run(load_round(url, n, tokens))
        print(f"{name:6s} clients={n:3d} " + format_row(results[n]), flush=True)
    return results


def format_row(r: dict) -> str:
    return (
        f"agg {r['aggregate_tok_s']:7.1f} tok/s | ttft p50 {r['ttft_p50_s']:.3f} s p99 {r['ttft_p99_s']:.3f} s"
        f" | itl p50 {r['itl_p50_ms']:6.1f} ms p99 {r['itl_p99_ms']:6.1f} ms"
        f" | per-stream decode {r['per_stream_decode_tok_s']:6.1f} tok/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=18431)
    parser.add_argument("--llama-python", default=str(REPO / ".venv-bench" / "bin" / "python"))
    parser.add_argument("--overhead-runs", type=int, default=5, help="in-process / HTTP pairs")
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    os.environ.update(thread_env(args.threads))

    report: dict = {"tokens": args.tokens, "threads": args.threads, "model": args.model.name}
    with blazr_server(args.model, args.port, args.threads, max(clients)) as url:
        report["blazr"] = bench_runtime("blazr", url, clients, args.tokens)
        reference = InProcess(args.model, max(clients))
        report["overhead"] = overhead_ratio(url, reference, args.tokens, args.overhead_runs)
        del reference
    print(
        f"blazr HTTP (1 client) / in-process decode, median of pairs: {report['overhead']['ratio_median']:.3f}x"
    )
    if not args.skip_llama:
        with llama_server(args.llama_python, args.model, args.port + 1, args.threads) as url:
            report["llama_cpp"] = bench_runtime("llama", url, clients, args.tokens)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
