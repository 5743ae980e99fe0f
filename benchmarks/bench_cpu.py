"""CPU benchmark: blazr's numpy backend against llama.cpp (llama-cpp-python) on SmolLM2-135M, in one run.

Each measurement runs in a fresh process, so time-to-first-token counts from process start (interpreter start,
imports, model load, prefill) and peak RSS is the process's own high-water mark. Both runtimes get the same
GGUF file, the same prompt token ids, greedy decoding and the same thread count.

    python benchmarks/bench_cpu.py [--runs 3] [--threads 2] [--json out.json]

llama-cpp-python is needed only here: install it in a separate environment and name its interpreter with
--llama-python (default: .venv-bench/bin/python beside this repo, else the current interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
Q4_1 = CACHE / "blazr-test-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
F32 = CACHE / "blazr-bench" / "SmolLM2-135M-Instruct.F32.gguf"
WORKER = Path(__file__).resolve().parent / "cpu_worker.py"
PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"


def ensure_models() -> None:
    """Fetch the Q4_1 default model and make the F32 copy llama.cpp and blazr both read."""
    sys.path.insert(0, str(REPO))
    from blazr.loaders.registry import fetch, lookup

    fetch(lookup("smollm2-135m-instruct"), Q4_1.parent)
    if not F32.exists():
        F32.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, str(Path(__file__).parent / "make_f32_gguf.py"), str(Q4_1), str(F32)], check=True
        )


def run_worker(python: str, runtime: str, model: Path, task: str, threads: int) -> dict:
    """One measurement in a fresh process; returns its JSON result plus ttft from our spawn time."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    start = time.time()
    cmd = [python, str(WORKER), runtime, str(model), task, str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{runtime} {task} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "first_token_time" in result:
        result["ttft_from_start"] = result["first_token_time"] - start
    return result


def measure(python: str, runtime: str, model: Path, runs: int, threads: int) -> dict:
    """Medians over `runs` fresh processes for every metric."""
    out: dict[str, list[float]] = {}
    for _ in range(runs):
        for task in ("ttft", "prefill128", "prefill512", "decode128"):
            r = run_worker(python, runtime, model, task, threads)
            for key, value in r.items():
                if isinstance(value, (int, float)) and key != "first_token_time":
                    out.setdefault(key, []).append(value)
    return {k: statistics.median(v) for k, v in out.items()}


def report(results: dict) -> str:
    rows = [
        ("decode tok/s (128 tokens)", "decode_tok_s", True),
        ("prefill tok/s (128 tokens)", "prefill128_tok_s", True),
        ("prefill tok/s (512 tokens)", "prefill512_tok_s", True),
        ("first token from process start (s)", "ttft_from_start", False),
        ("peak RSS (MB)", "peak_rss_mb", False),
    ]
    lines = []
    for model, by_rt in results.items():
        lines.append(f"\n## {model}\n")
        lines.append("| metric | blazr | llama.cpp | blazr / llama.cpp |")
        lines.append("|---|---|---|---|")
        for label, key, _higher_better in rows:
            b, l = by_rt["blazr"].get(key), by_rt["llama.cpp"].get(key)
            if b is None or l is None:
                continue
            lines.append(f"| {label} | {b:.2f} | {l:.2f} | {b / l:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--llama-python", default=None, help="interpreter that has llama_cpp installed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    llama_python = args.llama_python or str(REPO / ".venv-bench/bin/python")
    if not Path(llama_python).exists():
        llama_python = sys.executable
    ensure_models()
    results: dict = {}
    for label, model in (("F32 GGUF", F32), ("Q4_1 GGUF (packed on both sides)", Q4_1)):
        results[label] = {
            "blazr": measure(sys.executable, "blazr", model, args.runs, args.threads),
            "llama.cpp": measure(llama_python, "llama.cpp", model, args.runs, args.threads),
        }
    print(
        f"# SmolLM2-135M-Instruct, {args.threads} threads, median of {args.runs} runs, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
