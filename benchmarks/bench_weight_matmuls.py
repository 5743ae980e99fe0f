"""A decode step's packed matmuls one weight kind at a time: blazr's lane dots vs llama.cpp's ggml on the same
tensors of one GGUF file, in the same run (microseconds per matmul of one token, each kind's layers in turn so
that the weights stream from memory as in a step).

python benchmarks/bench_weight_matmuls.py MODEL.gguf --llama-python .venv-bench/bin/python [--threads 2]

llama.cpp's side runs in a child process of this Python that loads llama-cpp-python's libggml (found through
--llama-python) by ctypes: one ggml graph of a mul_mat per layer's tensor, computed by ggml_graph_compute_with_ctx
with the same thread count. blazr's side is cpu_lane_matmul.LaneMatmul, the CPU backend's decode matmul. Not
the whole step (bench_quant.py is): it says which weight kind a gap sits in. blazr fuses q/k/v and gate/up into
one matmul each; this times the tensors as the file stores them, separately, on both sides.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPEATS = 15


def groups(path: str) -> dict[str, list]:
    """'<tensor kind> <type>' -> the file's tensors of that kind and type (blk.N.ffn_down.weight -> ffn_down)."""
    from gguf import GGUFReader

    found: dict[str, list] = collections.defaultdict(list)
    for t in GGUFReader(path).tensors:
        if len(t.shape) != 2 or t.tensor_type.name in ("F32", "F16", "BF16"):
            continue
        kind = re.sub(r"^blk\.\d+\.", "", t.name).removesuffix(".weight")
        found[f"{kind} {t.tensor_type.name}"].append(t)
    return dict(found)


def best_us(run, count: int) -> float:
    run()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best / count * 1e6


def time_blazr(path: str, threads: int) -> dict[str, float]:
    import numba

    from blazr.quant.cpu_blocks import format_tag
    from blazr.quant.cpu_lane_matmul import LaneMatmul

    numba.set_num_threads(threads)
    result = {}
    for name, tensors in groups(path).items():
        fmt = tensors[0].tensor_type.name
        blocks = [np.ascontiguousarray(t.data) for t in tensors]  # (N, row_bytes) each
        matmuls = [LaneMatmul(b, format_tag(fmt), b.shape[0], 16) for b in blocks]
        x = (
            np.random.default_rng(0).standard_normal((1, int(tensors[0].shape[0]))).astype(np.float32)
        )  # (1, K)

        def run(matmuls=matmuls, x=x):
            for matmul in matmuls:
                matmul(x)

        result[name] = best_us(run, len(matmuls))
    return result


class _Params(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def time_llama(path: str, threads: int, lib_dir: str) -> dict[str, float]:
    """ggml's matmul per tensor kind, in this process (a child: run by main with --ggml-lib)."""
    ptr = ctypes.c_void_p
    base = ctypes.CDLL(str(Path(lib_dir, "libggml-base.so")), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(Path(lib_dir, "libggml-cpu.so")), mode=ctypes.RTLD_GLOBAL)
    cpu.ggml_cpu_init()
    base.ggml_init.restype, base.ggml_init.argtypes = ptr, [_Params]
    base.ggml_new_tensor_2d.restype = ptr
    base.ggml_new_tensor_2d.argtypes = [ptr, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    base.ggml_mul_mat.restype, base.ggml_mul_mat.argtypes = ptr, [ptr, ptr, ptr]
    base.ggml_new_graph.restype, base.ggml_new_graph.argtypes = ptr, [ptr]
    base.ggml_build_forward_expand.argtypes = [ptr, ptr]
    base.ggml_get_data.restype, base.ggml_get_data.argtypes = ptr, [ptr]
    base.ggml_free.argtypes = [ptr]
    cpu.ggml_graph_compute_with_ctx.argtypes = [ptr, ptr, ctypes.c_int]
    result = {}
    for name, tensors in groups(path).items():
        nbytes = sum(t.data.nbytes for t in tensors)
        ctx = base.ggml_init(_Params(2 * nbytes + (256 << 20), None, False))
        k = int(tensors[0].shape[0])
        x = base.ggml_new_tensor_2d(ctx, 0, k, 1)  # (K, 1) float32
        values = np.random.default_rng(0).standard_normal(k).astype(np.float32)
        ctypes.memmove(base.ggml_get_data(x), values.ctypes.data, values.nbytes)
        graph = base.ggml_new_graph(ctx)
        for t in tensors:
            w = base.ggml_new_tensor_2d(ctx, int(t.tensor_type), int(t.shape[0]), int(t.shape[1]))
            ctypes.memmove(base.ggml_get_data(w), t.data.ctypes.data, t.data.nbytes)
            base.ggml_build_forward_expand(graph, base.ggml_mul_mat(ctx, w, x))
        result[name] = best_us(lambda ctx=ctx, graph=graph: cpu.ggml_graph_compute_with_ctx(ctx, graph, threads),
                               len(tensors))  # fmt: skip
        base.ggml_free(ctx)
    return result


def ggml_lib_dir(llama_python: str) -> str:
    code = "import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent / 'lib')"
    return subprocess.run(
        [llama_python, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--llama-python", help="a Python with llama-cpp-python installed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ggml-lib", help=argparse.SUPPRESS)  # the child's mode: time llama.cpp, print JSON
    args = ap.parse_args()
    if args.ggml_lib:
        print(json.dumps(time_llama(args.model, args.threads, args.ggml_lib)))
        return
    llama: dict[str, float] = {}
    if args.llama_python:
        child = [sys.executable, __file__, args.model, "--threads", str(args.threads)]
        out = subprocess.run([*child, "--ggml-lib", ggml_lib_dir(args.llama_python)], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        llama = json.loads(out.strip().splitlines()[-1])
    ours = time_blazr(args.model, args.threads)
    print(f"{Path(args.model).name}, {args.threads} threads, us per matmul of one token (best of {REPEATS})")
    print("| tensor | layers | blazr | llama.cpp | ratio (llama.cpp time / blazr time) |")
    print("|---|---:|---:|---:|---:|")
    counts = {name: len(tensors) for name, tensors in groups(args.model).items()}
    for name, us in ours.items():
        theirs = llama.get(name)
        ratio = f"{theirs / us:.2f}x" if theirs else "-"
        print(f"| {name} | {counts[name]} | {us:.1f} | {theirs:.1f} | {ratio} |" if theirs else
              f"| {name} | {counts[name]} | {us:.1f} | - | - |")  # fmt: skip


if __name__ == "__main__":
    main()
