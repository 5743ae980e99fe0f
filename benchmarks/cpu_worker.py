"""One benchmark measurement in a fresh process; prints one JSON line. Run by bench_cpu.py.

python cpu_worker.py blazr|llama.cpp MODEL.gguf ttft|prefill128|prefill512|decode128|decode128@4096 THREADS

decode128@N: 128 decode steps after a prompt of N tokens (a state-space model's step cost is flat in N).
"""

from __future__ import annotations

import json
import resource
import sys
import time

PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"
DECODE_TOKENS = 128


def long_prompt(n: int, first: int = 100) -> list[int]:
    """n deterministic in-vocabulary ids, the same for both runtimes (another `first`: other ids)."""
    return [first + (i * 7919) % 40000 for i in range(n)]


def context_of(task: str) -> int:
    """The context a task needs: decode128@N's prompt plus its steps, else 2048."""
    return int(task.split("@")[1]) + DECODE_TOKENS + 8 if "@" in task else 2048


class Blazr:
    def __init__(self, model: str, threads: int, num_ctx: int = 2048):
        import blazr

        self.llm = blazr.load(model, num_ctx=num_ctx)

    def first_token(self) -> None:
        next(iter(self.llm.stream(PROMPT, temperature=0, max_tokens=1)))

    def prefill(self, ids: list[int]) -> float:
        self.llm.generate(ids, temperature=0, max_tokens=1)
        return self.llm.last_stats.prefill_seconds

    def decode(self, prompt: list[int] = PROMPT, steps: int = DECODE_TOKENS) -> float:
        # steps + 1 tokens: the first comes from the prefill, the rest are timed decode steps
        self.llm.generate(prompt, temperature=0, max_tokens=steps + 1, ignore_eos=True)
        return self.llm.last_stats.decode_seconds


class LlamaCpp:
    def __init__(self, model: str, threads: int, num_ctx: int = 2048):
        from llama_cpp import Llama

        self.llm = Llama(
            model, n_ctx=num_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False
        )

    def _next(self) -> int:
        """Greedy next token from the last evaluated position (eval keeps only that row of logits)."""
        import numpy as np

        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        return int(np.argmax(logits))

    def first_token(self) -> None:
        self.llm.reset()
        self.llm.eval(PROMPT)
        self._next()

    def prefill(self, ids: list[int]) -> float:
        self.llm.reset()
        t = time.perf_counter()
        self.llm.eval(ids)
        self._next()
        return time.perf_counter() - t

    def decode(self, prompt: list[int] = PROMPT, steps: int = DECODE_TOKENS) -> float:
        self.llm.reset()
        self.llm.eval(prompt)
        tok = self._next()
        t = time.perf_counter()
        for _ in range(steps):
            self.llm.eval([tok])
            tok = self._next()
        return time.perf_counter() - t


def main() -> None:
    runtime, model, task, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rt = (Blazr if runtime == "blazr" else LlamaCpp)(model, threads, context_of(task))
    result: dict = {}
    if task == "ttft":
        rt.first_token()
        result["first_token_time"] = time.time()
    else:
        # warm-up: first-touch page faults and kernel loading are not what we time. A prompt of the timed
        # length, so that a mixture of experts has had each expert's prompt kernels run (16 tokens spread
        # over 64 experts only ever took the decode kernels)
        # (other ids than the timed prompt's: blazr's prefix cache would otherwise serve the timed one)
        n = int(task.removeprefix("prefill")) if task.startswith("prefill") else 16
        rt.prefill(long_prompt(n, first=101))
        if not task.startswith("prefill"):
            # and a few decode steps: their kernels (one-token dots, decode attention) are others than a
            # prompt's, and on a cold kernel cache they compiled inside the timed decode (SmolLM2 9.5 tok/s
            # against 31.0 a run later, 2-core AMD EPYC, Zen 1 class)
            rt.decode(long_prompt(8, first=102), steps=4)
        if task.startswith("prefill"):
            result[f"{task}_tok_s"] = n / rt.prefill(long_prompt(n))
        elif "@" in task:
            result["decode_tok_s"] = DECODE_TOKENS / rt.decode(long_prompt(int(task.split("@")[1])))
        else:
            result["decode_tok_s"] = DECODE_TOKENS / rt.decode()
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    main()
