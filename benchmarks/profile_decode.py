"""Where a decode step's time goes on the CPU backend: time per backend op and, for the matmuls, per weight
shape and format (with the bytes per second each reaches), over greedy decode steps of one sequence.

python benchmarks/profile_decode.py MODEL.gguf [--tokens 64] [--threads N]

Not a peer comparison (bench_quant.py and bench_cpu.py are): it says which op, and which matrix, to work on.
The ops are timed by wrapping the backend's methods in this process only; the plain decode speed printed
first is measured without the wrappers.
"""

from __future__ import annotations

import argparse
import collections
import time

OPS = ("matmul", "embed", "rms_norm", "rope", "kv_write", "attention", "glu", "act", "layer_norm", "binary")
PROMPT = "Write a long story about a dragon and a knight"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    import blazr
    from blazr.backends.cpu import Backend

    if args.threads:
        from numba import set_num_threads

        set_num_threads(args.threads)
    llm = blazr.load(args.model, num_ctx=1024)
    greedy = dict(max_tokens=args.tokens, temperature=0, ignore_eos=True)
    llm.generate(PROMPT, **greedy)  # compiles and warms
    best = min(_seconds(lambda: llm.generate(PROMPT, **greedy)) for _ in range(3))
    print(f"{args.tokens} tokens after a {len(llm.tokenize(PROMPT))}-token prompt: best of 3 {best:.3f} s "
          f"({args.tokens / best:.1f} tok/s)")  # fmt: skip

    op_time, op_calls = collections.Counter(), collections.Counter()
    mm_time, mm_calls, mm_bytes = collections.Counter(), collections.Counter(), {}
    inside = [False]  # an op another op calls (a stacked weight's parts, glu's act) counts in its caller only

    def timed(name, method):
        def run(self, *a, **k):
            if inside[0]:
                return method(self, *a, **k)
            inside[0] = True
            start = time.perf_counter()
            try:
                result = method(self, *a, **k)
            finally:
                inside[0] = False
            spent = time.perf_counter() - start
            op_time[name] += spent
            op_calls[name] += 1
            if name == "matmul" and a[0].shape[0] == 1:  # one decode token (the prompt's matmuls are apart)
                w = a[1]
                key = (getattr(w, "format", str(getattr(w, "dtype", "?"))), tuple(w.shape))
                mm_time[key] += spent
                mm_calls[key] += 1
                mm_bytes[key] = w.nbytes  # packed blocks or a float array
            return result

        return run

    for name in OPS:
        if hasattr(Backend, name):
            setattr(Backend, name, timed(name, getattr(Backend, name)))
    total = _seconds(lambda: llm.generate(PROMPT, **greedy))
    print(f"with the ops timed: {total * 1e3:.1f} ms, of which in ops {sum(op_time.values()) * 1e3:.1f} ms")
    for name, spent in op_time.most_common():
        print(
            f"  {name:10s} {spent * 1e3:8.1f} ms  {op_calls[name]:6d} calls  {spent / op_calls[name] * 1e6:8.1f} us/call"
        )
    print("decode matmuls (one token), per weight:")
    # the prompt's pass gives the first token (its last-token LM head counts here too)
    steps = args.tokens - 1
    for key, spent in mm_time.most_common():
        us = spent / mm_calls[key] * 1e6
        print(f"  {key[0]:6s} {str(key[1]):14s} {us:8.1f} us/call  {mm_calls[key] / steps:5.1f} a step  "
              f"{mm_bytes[key] / us / 1e3:6.2f} GB/s")  # fmt: skip


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
