"""Concurrency: aggregate decode tok/s of N sequences in one engine against one sequence alone, in one process.

python benchmarks/bench_concurrency.py MODEL.gguf [--seqs 1,4,8,16] [--tokens 64] [--rounds 3] [--profile N]

Each round runs every concurrency level (order alternating between rounds, so drift hits all): N greedy requests
of distinct short prompts, `--tokens` generated tokens each (EOS ignored), submitted together to an Engine with
max_seqs=N. Aggregate tok/s = generated tokens / wall time of the decode steps (the steps after every prompt is
in); the prompt steps are reported apart. Prints the best round of each level and its ratio to N = 1: the CPU
issue's target is >= 6x at N = 16 on SmolLM2. `--profile N` prints a cProfile of the decode steps at N.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

PROMPTS = [
    "The capital of France is", "Once upon a time", "The best way to learn Python is", "Water boils at",
    "My favourite colour is", "In 1969, astronauts", "The recipe needs", "A prime number is",
    "The weather today", "Cats and dogs", "The ocean is", "To be or not to be", "The train left",
    "Mountains are", "Computers can", "The song begins",
]  # fmt: skip


def run_level(llm, n: int, tokens: int, profiler: cProfile.Profile | None) -> tuple[float, float]:
    """(decode tok/s aggregate, prompt seconds) for n concurrent sequences."""
    from blazr.engine import Engine, SamplingParams

    engine = Engine(llm.model, llm.tokenizer, llm.backend, num_ctx=512, max_seqs=n)
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    for i in range(n):
        prompt = PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS))
        engine.add_request(f"r{i}", llm.tokenize(prompt), params)
    start = time.perf_counter()
    prompt_seconds, generated, decode_start = 0.0, 0, None
    while engine.has_unfinished():
        in_decode = decode_start is not None
        if in_decode and profiler is not None:
            profiler.enable()
        outs = engine.step()
        if in_decode and profiler is not None:
            profiler.disable()
        new = sum(len(o.token_ids) for o in outs)
        if decode_start is None and new == n:  # every prompt is in: the next steps only decode
            prompt_seconds = time.perf_counter() - start
            decode_start = time.perf_counter()
        elif decode_start is not None:
            generated += new
    return generated / (time.perf_counter() - decode_start), prompt_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--seqs", default="1,4,8,16")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="profile the decode steps at this concurrency")
    args = ap.parse_args()

    import blazr

    llm = blazr.load(args.model, num_ctx=2048)
    levels = [int(s) for s in args.seqs.split(",")]
    for n in levels:  # warm-up: compile every kernel shape first
        run_level(llm, n, 4, None)
    best: dict[int, float] = {n: 0.0 for n in levels}
    for rnd in range(args.rounds):
        for n in levels[:: 1 if rnd % 2 == 0 else -1]:
            rate, prompt_s = run_level(llm, n, args.tokens, None)
            best[n] = max(best[n], rate)
            print(f"round {rnd}: {n:3d} seqs: decode {rate:7.1f} tok/s aggregate, "
                  f"prompts {prompt_s * 1000:.0f} ms")  # fmt: skip
    base = best[levels[0]]
    for n in levels:
        ratio = best[n] / base
        print(f"{n:3d} seqs: {best[n]:7.1f} tok/s = {ratio:.2f}x {levels[0]} seq (best of {args.rounds})")
    if args.profile:
        profiler = cProfile.Profile()
        run_level(llm, args.profile, args.tokens, profiler)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
