"""Where the int8 GEMM overtakes the int8 lane dots: a model's matmuls at T tokens on each kernel.

python benchmarks/bench_int8_crossover.py MODEL.gguf [--tokens 1,4,8,12,16,24,32] [--repeats 5]

Both kernels give bit-identical results (tests/test_quant_int8_lanes.py), so the token count at which a batch
switches from the lane dots to the GEMM (blazr.quant.cpu_kernels.INT8_GEMM_MIN_TOKENS) is a speed choice only.
For each T this runs every packed int8 weight of the model once per repeat (the weights of one forward pass,
each distinct matrix once, so they stream from memory as in a decode step) and prints the best total time of
each kernel and the ratio GEMM / lanes (> 1: the lane dots are faster), for all of them and per format.
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np


def model_weights(llm) -> list:
    """Every distinct packed weight the int8 kernels take, found among the loaded model's objects."""
    from blazr.quant import QuantWeight
    from blazr.quant.cpu_int8_gemm import FORMATS as GEMM_FORMATS
    from blazr.quant.cpu_int8_lanes import FORMATS as LANE_FORMATS

    del llm  # keeps the model alive while gc walks it
    seen: dict[int, object] = {}
    for obj in gc.get_objects():
        if isinstance(obj, QuantWeight) and obj.format in GEMM_FORMATS and obj.format in LANE_FORMATS:
            seen.setdefault(id(obj.blocks), obj)
    return list(seen.values())


def total_seconds(kernel, weights, x_by_k, repeats: int) -> float:
    from blazr.numba_threads import num_threads
    from blazr.quant.cpu_kernels import _rows_per_task, format_tag

    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for w in weights:
            n, k = w.shape
            x = x_by_k[k]
            out = np.empty((x.shape[0], n), dtype=np.float32)  # (T, N)
            arg = num_threads() if kernel.__name__ == "matmul_int8_gemm" else _rows_per_task(n)
            kernel(x, w.blocks, format_tag(w.format), out, arg)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", default="1,4,8,12,16,24,32")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import blazr
    from blazr.quant.cpu_int8_gemm import matmul_int8_gemm
    from blazr.quant.cpu_lane_matmul import matmul_int8_lanes

    llm = blazr.load(args.model, num_ctx=512)
    weights = model_weights(llm)
    formats = sorted({w.format for w in weights})
    print(f"{len(weights)} packed weights ({', '.join(formats)}), "
          f"{sum(w.nbytes for w in weights) / 1e6:.1f} MB")  # fmt: skip
    rng = np.random.default_rng(0)
    for t in (int(s) for s in args.tokens.split(",")):
        x_by_k = {k: rng.standard_normal((t, k)).astype(np.float32) for k in {w.shape[1] for w in weights}}
        total_seconds(matmul_int8_lanes, weights, x_by_k, 1)  # compile / warm
        total_seconds(matmul_int8_gemm, weights, x_by_k, 1)
        parts = [("all", weights)] + [(f, [w for w in weights if w.format == f]) for f in formats]
        for name, group in parts if len(formats) > 1 else parts[:1]:
            lanes = total_seconds(matmul_int8_lanes, group, x_by_k, args.repeats)
            gemm = total_seconds(matmul_int8_gemm, group, x_by_k, args.repeats)
            print(f"T={t:3d} {name:>5}: lanes {lanes * 1e3:7.2f} ms  gemm {gemm * 1e3:7.2f} ms  "
                  f"gemm/lanes {gemm / lanes:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
