"""Warm-up: take every kernel path a model's requests take once, before the first request does.

Why: numba compiles a CPU kernel at its first call for each argument type and keeps the machine code in its
on-disk cache (`cache=True`; the cache index is keyed by the CPU's name and features, so one cache directory
serves several machines). On a fresh install SmolLM2's kernels took ~17 s to compile (2-core Intel Xeon), and
a first chat that met the compiler waited that long. A server warms a model before `/health` says it is ready
and `blazr pull` warms the model it fetched, so a fresh install's first answer reads its kernels from the
cache (blazr.commands.models, blazr.server.state; docs/architecture.md "First start").

Which paths (blazr.quant.cpu_kernels.path, blazr.backends.cpu.Backend.attention): a prompt long enough for
every format's GEMM (int8 or float), one short enough for the row and lane dots, one sequence's decode step
(serial attention) and a decode step of PARALLEL_DECODE_SEQS sequences (attention on numba's pool).
"""

from __future__ import annotations

import uuid

from blazr.engine.engine import Engine
from blazr.engine.request import SamplingParams

# Tokens of the long warm-up prompt: above every format's int8 GEMM crossover (cpu_kernels.int8_gemm_min_tokens,
# at most 28, Q8_0's) and the float GEMM's (cpu_kernels.GEMM_MIN_TOKENS, 12).
WARM_PROMPT_TOKENS = 40
WARM_SHORT_PROMPT_TOKENS = 3  # below every crossover: the lane and row dots
# blazr.backends.cpu.PARALLEL_DECODE_SEQS: a decode step of this many sequences attends in parallel.
WARM_PARALLEL_SEQS = 8
# Ordinary text for the prompts: the ids are the model's own, so no token is special and none is out of range.
FILLER_TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm afternoon sun. "


def warm_engine(engine: Engine, filler_ids: list[int]) -> None:
    """Run the warm-up requests (greedy, two tokens each, EOS ignored) to completion on `engine`.
    filler_ids: token ids of ordinary text, repeated as needed. Each request gets its own prompt, so the
    prefix cache does not shorten the prompts that are meant to run whole."""
    ids = filler_ids or [0]
    longest = max(1, min(WARM_PROMPT_TOKENS, engine.num_ctx - 3))  # room for the two generated tokens
    ids = (ids * (longest // len(ids) + 2))[: longest + WARM_PARALLEL_SEQS]
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    short = min(WARM_SHORT_PROMPT_TOKENS, longest)
    rounds = [
        [ids[:longest]],  # the prompt GEMMs, then one sequence's decode steps
        [ids[1 : 1 + short]],  # the row and lane dots on a prompt
        [ids[2 + i : 2 + i + short] for i in range(WARM_PARALLEL_SEQS)],  # one decode step of 8 sequences
    ]
    for prompts in rounds:
        for prompt in prompts:
            engine.add_request(f"warm-up-{uuid.uuid4().hex}", prompt, params)
        while engine.has_unfinished():
            engine.step()
