"""blazr against itself: the working tree beside an earlier revision, on the same file in the same run.

For refactors that must not cost speed (the model-layer restructure): each measurement runs in a fresh
process (benchmarks/cpu_worker.py) with that tree first on PYTHONPATH, the two trees alternate run by run so
a machine that slows down slows both, and the table gives the median of each and their ratio.

    python benchmarks/bench_revisions.py REV [--model FILE.gguf] [--tasks decode128 prefill512] [--runs 5]

REV is checked out into a temporary git worktree, removed afterwards. The default model is the test suite's
SmolLM2-135M Q4_1 GGUF.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
DEFAULT_MODEL = CACHE / "blazr-test-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def measure(tree: Path, model: Path, task: str, threads: int) -> float:
    """tokens/s of one task in a fresh process running the blazr in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}  # before the editable install of this checkout
    worker = REPO / "benchmarks" / "cpu_worker.py"
    out = subprocess.run(
        [sys.executable, str(worker), "blazr", str(model), task, str(threads)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return float(next(value for key, value in result.items() if key.endswith("_tok_s")))


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rev", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--tasks", nargs="+", default=["decode128", "prefill128", "prefill512"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if not args.model.is_file():
        parser.error(f"--model {args.model} does not exist")
    with tempfile.TemporaryDirectory(prefix="blazr-rev-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base), args.rev], check=True
        )
        try:
            trees = {args.rev: base, "working tree": REPO}
            for tree in trees.values():  # compile and cache each tree's kernels outside the timed runs
                measure(tree, args.model, "decode128", args.threads)
            print(
                f"{cpu_model()}, {args.threads} threads, {args.model.name}, median of {args.runs} fresh processes"
            )
            print(f"{'task':12s} {args.rev[:12]:>14s} {'working tree':>14s} {'ratio':>7s}")
            for task in args.tasks:
                runs: dict[str, list[float]] = {name: [] for name in trees}
                for _ in range(args.runs):
                    for name, tree in trees.items():
                        runs[name].append(measure(tree, args.model, task, args.threads))
                before, after = (statistics.median(runs[name]) for name in trees)
                print(f"{task:12s} {before:11.1f} t/s {after:11.1f} t/s {after / before:7.3f}")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)


if __name__ == "__main__":
    main()
