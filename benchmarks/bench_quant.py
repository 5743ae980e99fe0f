"""Quantized CPU benchmark: blazr vs llama.cpp on the same GGUF files in the same run, plus each runtime's
fraction of the memory-bandwidth floor (weight bytes read per decoded token / measured copy bandwidth).

python benchmarks/bench_quant.py FILE.gguf [...] [--llama-python PYTHON] [--threads 2] [--tasks decode128 prefill128]

Each measurement is one fresh process (benchmarks/cpu_worker.py). Make shape-real files with
benchmarks/make_shape_models.py. Prints one markdown table row per file and task.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("cpu_worker.py")


def copy_bandwidth(nbytes: int = 1 << 29) -> float:
    """Bytes per second of a large memcpy (read + write both counted), best of 5."""
    src, dst = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def weight_bytes_per_token(path: Path) -> int:
    """Bytes of every weight a decode step reads: all but the embedding, which is read once per token
    as a row, unless it is tied (then it is the LM head and read whole); of a mixture's 3-D expert tensors
    only the share of the experts a token uses (expert_used_count of expert_count)."""
    from blazr.loaders.gguf import read_gguf

    gf = read_gguf(path)
    infos = {t.name: t for t in gf.tensors}
    arch = gf.metadata.get("general.architecture")
    used = gf.metadata.get(f"{arch}.expert_used_count", 1)
    share = used / gf.metadata.get(f"{arch}.expert_count", 1)
    tied = "output.weight" not in infos
    total = 0.0
    for name, t in infos.items():
        if name != "token_embd.weight" or tied:
            total += t.nbytes * (share if name.endswith("_exps.weight") else 1.0)
    return int(total)


def measure(python: str, runtime: str, path: Path, task: str, threads: int) -> dict:
    cmd = [python, str(WORKER), runtime, str(path), task, str(threads)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if run.returncode:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed"}
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--llama-python", default=None, help="a python with llama-cpp-python installed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tasks", nargs="+", default=["decode128", "prefill128"])
    args = ap.parse_args()
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e9:.1f} GB/s")
    print("| file | task | blazr | llama.cpp | ratio | blazr % of floor | llama.cpp % of floor |")
    print("|---|---|---|---|---|---|---|")
    for path in args.files:
        floor_s = weight_bytes_per_token(path) / bw  # seconds per token if only weights moved, at copy speed
        for task in args.tasks:
            ours = measure(sys.executable, "blazr", path, task, args.threads)
            peer = (
                measure(args.llama_python, "llama.cpp", path, task, args.threads) if args.llama_python else {}
            )
            key = "decode_tok_s" if task.startswith("decode") else f"{task}_tok_s"
            a, b = ours.get(key), peer.get(key)
            ratio = f"{a / b:.2f}x" if a and b else "-"
            floors = [f"{100 * floor_s * r:.0f}%" if r and key == "decode_tok_s" else "-" for r in (a, b)]
            cells = [f"{r:.1f}" if r else str(d.get("error", "-")) for r, d in ((a, ours), (b, peer))]
            print(f"| {path.name} | {task} | {cells[0]} | {cells[1]} | {ratio} | {floors[0]} | {floors[1]} |")


if __name__ == "__main__":
    main()
