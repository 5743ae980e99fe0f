"""Micro-benchmark of Backend.attention_dense on embedding shapes (all-MiniLM-L6-v2: H = 12, Dh = 32): the
cpu backend's numba kernel (blazr.backends.cpu_dense_attention) against its numpy path (fast_kernels=False)
and torch's scaled_dot_product_attention on the same batch padded to its longest sequence (as HF BERT runs).

    python benchmarks/bench_attention_dense.py [--repeats 5] [--q-tiles 128 ...] [--torch-python PY]

The first numba column is the backend's choice (the short-sequence kernel when every sequence has at most
cpu_dense_short.MAX_KEYS keys); each --q-tiles column times the tiled kernel alone at that query tile.

torch is optional: it is timed in a subprocess of --torch-python (default: .venv-parity/bin/python beside this
repo if it exists, else this interpreter), and its column says "-" when torch cannot be imported there.
Times are the best of --repeats after one warm-up call, in milliseconds; threads are numba's / torch's default
(every core). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
HEADS, HEAD_DIM = 12, 32  # all-MiniLM-L6-v2
# name: sequence lengths of the batch (encoder self-attention: q_len = kv_len)
SHAPES = {
    "32 x 128": [128] * 32,
    "32 x 10..128": "rand32",
    "256 x 10..128": "rand256",
    "256 x 16": [16] * 256,
    "1 x 512": [512],
    "8 x 512": [512] * 8,
}


def lengths(spec) -> list[int]:
    if isinstance(spec, list):
        return spec
    return np.random.default_rng(0).integers(10, 129, int(spec[4:])).tolist()


def inputs(lens: list[int]):
    rng = np.random.default_rng(1)
    t = sum(lens)
    q, k, v = (rng.standard_normal((t, HEADS, HEAD_DIM)).astype(np.float32) for _ in range(3))  # (T, H, Dh)
    return q, k, v, np.array(lens, dtype=np.int32)


def best_ms(fn, repeats: int) -> float:
    fn()  # warm-up: numba's compile / cache load, torch's first-call setup
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def torch_times(repeats: int) -> dict[str, float]:
    """Runs inside the torch interpreter: SDPA on each shape padded to (B, H, Lmax, Dh) with a key mask."""
    import torch

    times = {}
    for name, spec in SHAPES.items():
        lens = lengths(spec)
        q, k, v, _ = inputs(lens)
        b, longest = len(lens), max(lens)
        padded = [torch.zeros(b, HEADS, longest, HEAD_DIM) for _ in range(3)]  # (B, H, L, Dh) each
        start = 0
        for i, n in enumerate(lens):
            for dst, src in zip(padded, (q, k, v), strict=True):
                dst[i, :, :n] = torch.from_numpy(src[start : start + n].transpose(1, 0, 2))
            start += n
        mask = torch.arange(longest)[None, :] < torch.tensor(lens)[:, None]  # (B, L) real keys
        mask = mask[:, None, None, :]  # (B, 1, 1, L)

        def run(padded=padded, mask=mask):
            with torch.inference_mode():
                torch.nn.functional.scaled_dot_product_attention(*padded, attn_mask=mask)

        times[name] = best_ms(run, repeats)
    return times


def torch_column(python: str, repeats: int) -> dict[str, float]:
    cmd = [python, str(Path(__file__).resolve()), "--torch-worker", "--repeats", str(repeats)]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if run.returncode:
        print(f"torch: not timed ({run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'failed'})")
        return {}
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--q-tiles", nargs="*", type=int, default=[], help="extra numba query tiles to time")
    local_torch = REPO / ".venv-parity" / "bin" / "python"
    default_torch = str(local_torch if local_torch.exists() else sys.executable)
    parser.add_argument("--torch-python", default=default_torch)
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        print(json.dumps(torch_times(args.repeats)))
        return 0

    sys.path.insert(0, str(REPO))
    from blazr.backends import cpu_dense_attention as kernels
    from blazr.backends import cpu_dense_short as short
    from blazr.backends.cpu import Backend

    fast, numpy_path = Backend(fast_kernels=True), Backend(fast_kernels=False)
    torch_ms = torch_column(args.torch_python, args.repeats)
    # the backend's choice: the short-sequence kernel (cpu_dense_short) when every sequence has at most
    # MAX_KEYS keys, else the tiled one; --q-tiles times the tiled kernel alone
    head = [
        "shape (B x len)",
        "tokens",
        f"numba (short <= {short.MAX_KEYS}, else q{kernels.Q_TILE} k{kernels.K_TILE})",
    ]
    head += [f"numba q{qt}" for qt in args.q_tiles]
    head += ["numpy", "torch sdpa", "numpy / numba", "torch / numba"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    scale = HEAD_DIM**-0.5
    for name, spec in SHAPES.items():
        q, k, v, lens = inputs(lengths(spec))
        dense = (q, k, v, lens, lens)
        ours = best_ms(partial(fast.attention_dense, *dense, scale), args.repeats)
        extra = []
        for qt in args.q_tiles:
            flags = (
                np.float32(scale),
                False,
                0,
                qt,
                np.empty_like(q),
                kernels.NO_REL,
                False,
            )  # out (T, H, Dh)
            extra.append(best_ms(partial(kernels.attention_dense, *dense, *flags), args.repeats))
        ref = best_ms(partial(numpy_path.attention_dense, *dense, scale), args.repeats)
        th = torch_ms.get(name)
        row = [name, str(len(q)), f"{ours:.2f}"] + [f"{t:.2f}" for t in extra]
        row += [f"{ref:.2f}", "-" if th is None else f"{th:.2f}", f"{ref / ours:.1f}x"]
        row.append("-" if th is None else f"{th / ours:.2f}x")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
