"""Batch invariance and its cost: N concurrent greedy chats against each alone, and decode speed with the
batch-invariant lane dots against the row dots they replaced (blazr.quant.cpu_int8_lanes), in one process.

python benchmarks/bench_batch_invariance.py MODEL.gguf [--requests 16] [--tokens 48] [--rounds 4]

Prints, for each decode kernel: how many of the N batched answers equal their solo answer token for token,
and single-sequence decode tok/s (best of the alternating rounds) with the ratio lanes / row dots.
"""

from __future__ import annotations

import argparse
import time

QUESTIONS = [
    "What is 2+2?", "Name three colors.", "Write a haiku about rain.", "What is the capital of Spain?",
    "Explain gravity in one sentence.", "List two prime numbers.", "Who wrote Hamlet?", "Say hello in French.",
    "What is water made of?", "Give me a fruit name.", "How many legs does a spider have?",
    "What is 10 times 3?", "Describe the sun briefly.", "What color is grass?", "Name a planet.",
    "What do bees make?",
]  # fmt: skip


def run(engine, requests) -> dict[str, list[int]]:
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
    got: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for out in engine.step():
            got.setdefault(out.request_id, []).extend(out.token_ids)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()

    import blazr
    from blazr.engine import Engine, SamplingParams
    from blazr.quant import cpu_kernels

    llm = blazr.load(args.model, num_ctx=2048)
    lanes = cpu_kernels.LANE_FORMATS
    kernels = {"lane dots": lanes, "row dots": frozenset()}
    chat = llm.tokenizer.apply_chat_template
    prompts = [
        llm.tokenize(chat([{"role": "user", "content": q}], add_generation_prompt=True), False)
        for q in (QUESTIONS * (args.requests // len(QUESTIONS) + 1))[: args.requests]
    ]
    greedy = SamplingParams(max_tokens=args.tokens, temperature=0.0)

    def engine(**kw):
        return Engine(llm.model, llm.tokenizer, llm.backend, num_ctx=512, **kw)

    for name, formats in kernels.items():
        cpu_kernels.LANE_FORMATS = formats
        jobs = [(f"q{i}", p, greedy) for i, p in enumerate(prompts)]
        solo = {rid: run(engine(max_seqs=1), [(rid, p, params)])[rid] for rid, p, params in jobs}
        start = time.perf_counter()
        batch = run(engine(max_seqs=args.requests), jobs)
        seconds = time.perf_counter() - start
        same = sum(batch[rid] == solo[rid] for rid in solo)
        tokens = sum(map(len, batch.values()))
        print(f"{name}: {same}/{len(solo)} batched answers equal their solo answer; "
              f"batch {tokens} tokens in {seconds:.1f} s")  # fmt: skip

    ids = llm.tokenize("The capital of France is")
    speed: dict[str, list[float]] = {name: [] for name in kernels}
    for rnd in range(args.rounds):
        for name in list(kernels)[:: 1 if rnd % 2 else -1]:  # alternate the order: drift hits both
            cpu_kernels.LANE_FORMATS = kernels[name]
            llm.generate(ids, temperature=0, max_tokens=65, ignore_eos=True)
            speed[name].append(64 / llm.last_stats.decode_seconds)
    for name, runs in speed.items():
        print(f"{name}: decode " + " ".join(f"{v:.1f}" for v in runs) + f" tok/s (best {max(runs):.1f})")
    print(f"lane dots / row dots (best of each): {max(speed['lane dots']) / max(speed['row dots']):.3f}x")
    cpu_kernels.LANE_FORMATS = lanes


if __name__ == "__main__":
    main()
