"""Embedding throughput: blazr vs sentence-transformers (PyTorch) vs llama.cpp's embedding mode, same model,
same sentences, same threads, one run; and blazr serve with concurrent clients against blazr in-process.

    python benchmarks/bench_embed.py [--model all-minilm] [--gguf MODEL.gguf] [--threads 2] [--sentences 1000]
        [--st-python .venv-parity/bin/python] [--llama-python .venv-bench/bin/python] [--clients 16]

The sentences (5-60 words, seeded) are the same for every runtime. Each runtime runs in its own process (its
own interpreter: sentence-transformers and llama-cpp-python live in other environments) and embeds the whole
set once to warm up, then `--repeats` times; the best time counts. sentence-transformers runs at batch sizes
16, 32 and 64 and llama.cpp with one or 16 sentences per call; each reports its best. --gguf is the same
model converted by llama.cpp's convert_hf_to_gguf.py (F32 to compare like with like). Prints sentences/s and
the ratios the embedding issue targets (blazr >= 1.5x sentence-transformers, >= 1.0x llama.cpp; serve with 16
clients >= 0.8x in-process).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = (
    "the a an of to in is was for on with as by at from that this it be are have has had not but or and if "
    "man woman child city river market music science history computer phone weather storm summer winter "
    "quickly slowly bright dark ancient modern small large green blue red engine library garden teacher "
    "student doctor river mountain island forest ocean system network model language question answer data "
    "travel train airport coffee breakfast evening morning company product customer service price report"
).split()


def sentences(n: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60))).capitalize() + "." for _ in range(n)
    ]


# ---- workers (each in its own process) ------------------------------------------------------------------


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up: kernel compiles, page faults, allocator growth
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def worker_blazr(args, texts: list[str]) -> dict:
    sys.path.insert(0, str(REPO))
    from blazr.tasks.embed import Embedder

    model = Embedder.load(args.model)
    seconds = best_time(lambda: model.embed(texts), args.repeats)
    return {"seconds": seconds, "detail": f"packed batches of {model.max_batch_tokens} tokens"}


def worker_st(args, texts: list[str]) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device="cpu")
    results = {
        b: best_time(lambda b=b: model.encode(texts, batch_size=b), args.repeats) for b in (16, 32, 64)
    }
    batch = min(results, key=results.get)
    return {"seconds": results[batch], "detail": f"batch_size {batch} (torch {torch.__version__})"}


def worker_llama(args, texts: list[str]) -> dict:
    """llama.cpp's embedding mode at its best here: a 512-token context, one or 16 sentences per embed() call
    (one was fastest: llama.cpp attends over the whole batch with a mask, so bigger batches cost more)."""
    from llama_cpp import Llama

    best = None
    for per_call in (1, 16):
        llm = Llama(
            model_path=args.gguf,
            embedding=True,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            n_ctx=512 * per_call,
            n_batch=512 * per_call,
            n_ubatch=512 * per_call,
            n_seq_max=per_call,
            verbose=False,
        )

        def run(per_call=per_call, llm=llm):
            for i in range(0, len(texts), per_call):
                llm.embed(texts[i : i + per_call], normalize=True)

        seconds = best_time(run, args.repeats)
        if best is None or seconds < best["seconds"]:
            best = {"seconds": seconds, "detail": f"{per_call} sentence(s) per embed() call"}
    return best


def worker_serve(args, texts: list[str]) -> dict:
    """blazr serve in a subprocess; `clients` concurrent clients each post 8 sentences at a time."""
    import asyncio
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "blazr",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-m",
        args.model,
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        chunks = [texts[i : i + 8] for i in range(0, len(texts), 8)]

        async def run_all() -> None:
            queue = list(chunks)
            async with httpx.AsyncClient(base_url=url, timeout=600) as client:

                async def one_client() -> None:
                    while queue:
                        chunk = queue.pop()
                        body = {"input": chunk, "encoding_format": "base64"}  # the openai SDK's default
                        reply = await client.post("/v1/embeddings", json=body)
                        reply.raise_for_status()

                await asyncio.gather(*(one_client() for _ in range(args.clients)))

        seconds = best_time(lambda: asyncio.run(run_all()), args.repeats)
        return {"seconds": seconds, "detail": f"{args.clients} clients, 8 sentences per request, base64"}
    finally:
        server.terminate()
        server.wait(30)


WORKERS = {"blazr": worker_blazr, "st": worker_st, "llama": worker_llama, "serve": worker_serve}


# ---- driver ---------------------------------------------------------------------------------------------


def run_worker(python: str, runtime: str, args) -> dict:
    cmd = [
        python,
        __file__,
        "--worker",
        runtime,
        "--model",
        args.model,
        "--threads",
        str(args.threads),
        "--sentences",
        str(args.sentences),
        "--repeats",
        str(args.repeats),
        "--clients",
        str(args.clients),
    ]
    if args.gguf:
        cmd += ["--gguf", args.gguf]
    env = {**_environ(), "OMP_NUM_THREADS": str(args.threads), "NUMBA_NUM_THREADS": str(args.threads)}
    if args.openblas_own_choice:  # numpy's OpenBLAS picks its kernels for this CPU (blazr's float32 matmuls)
        env.pop("OPENBLAS_CORETYPE", None)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if run.returncode:
        tail = run.stderr.strip().splitlines()[-1:] or ["failed"]
        return {"error": tail[0]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def _environ() -> dict:
    import os

    return dict(os.environ)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all-minilm", help="blazr model name/path (also what the peers load)")
    ap.add_argument("--gguf", default=None, help="the same model as GGUF, for llama.cpp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--st-python", default=str(REPO / ".venv-parity" / "bin" / "python"))
    ap.add_argument("--llama-python", default=str(REPO / ".venv-bench" / "bin" / "python"))
    ap.add_argument(
        "--openblas-own-choice",
        action="store_true",
        help="unset OPENBLAS_CORETYPE for the runtimes' processes (a machine that pins it to an older CPU "
        "holds numpy's sgemm, and so blazr's float32 matmuls, to that CPU's kernels)",
    )
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    texts = sentences(args.sentences)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args, texts)))
        return
    if args.model == "all-minilm" or not Path(args.model).exists():  # peers need the directory itself
        sys.path.insert(0, str(REPO))
        from blazr.model_dir import resolve_model

        args.model = str(resolve_model(args.model))
    runs = {"blazr": sys.executable, "serve": sys.executable, "st": args.st_python}
    if args.gguf:
        runs["llama"] = args.llama_python
    results = {name: run_worker(python, name, args) for name, python in runs.items()}
    rate = {n: args.sentences / r["seconds"] for n, r in results.items() if "seconds" in r}
    import os

    coretype = "unset" if args.openblas_own_choice else os.environ.get("OPENBLAS_CORETYPE", "unset")
    print(
        f"{args.sentences} sentences (5-60 words), {args.threads} threads, model {args.model}, "
        f"OPENBLAS_CORETYPE {coretype}"
    )
    print("| runtime | sentences/s | how |\n|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {rate[name]:.1f} | {r['detail']} |"
            if name in rate
            else f"| {name} | - | {r['error']} |"
        )
    for peer, target in (("st", 1.5), ("llama", 1.0), ("serve", 0.8)):
        if "blazr" in rate and peer in rate:
            ratio = rate[peer] / rate["blazr"] if peer == "serve" else rate["blazr"] / rate[peer]
            label = "serve / in-process" if peer == "serve" else f"blazr / {peer}"
            print(f"{label}: {ratio:.2f}x (target >= {target}x)")


if __name__ == "__main__":
    main()
