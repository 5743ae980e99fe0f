"""Per-token Python time of each family's decode step against a Llama step of the same shape.

    python benchmarks/bench_family_overhead.py [--families gemma3 qwen3 ...] [--layers 18] [--steps 200]

Every model here is tiny in width (hidden 64, 4 query / 2 KV heads of 16, vocab 256) and deep as Gemma 3 270M
(18 layers), so a decode step's time is the Python of the model code plus the dispatch of each backend op,
not arithmetic. Random weights are drawn for the shapes each model declares. Each family's step is timed in
alternation with Llama's (median of `--runs` rounds of `--steps` steps), and the number of Python function
calls of one step is counted with cProfile: a family that needs more ops (Gemma 3's four norms and q/k norms
per layer) pays for them, which the call count shows next to the time.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPE = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
BLOCK_SIZE, BLOCKS = 16, 64


def build(family: str, layers: int, backend):
    from blazr.models import build_model, get_model_module
    from tests.test_models import checkpoint
    from tests.tiny_models import tiny_config

    config = tiny_config(family) | SHAPE | {"num_hidden_layers": layers}
    if family == "gemma3":
        config.pop("layer_types", None)
    module = get_model_module(config)
    shapes = module.Model(module.ModelArgs.from_dict(config), backend).weight_shapes()
    rng = np.random.default_rng(0)
    weights = {name: (0.1 * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}
    return build_model(checkpoint(config, weights), backend)


def decode_steps(model, backend, steps: int) -> float:
    """Seconds per decode step over `steps` steps after a 4-token prompt."""
    from blazr.models.batch import ForwardBatch

    table = list(range(BLOCKS))
    cache = model.make_cache(BLOCKS, BLOCK_SIZE)
    backend.download(model(ForwardBatch.single([1, 2, 3, 4], 0, table, BLOCK_SIZE), cache))
    start = time.perf_counter()
    for i in range(steps):
        backend.download(model(ForwardBatch.single([5], 4 + i, table, BLOCK_SIZE), cache))
    return (time.perf_counter() - start) / steps


def calls_per_step(model, backend) -> int:
    from blazr.models.batch import ForwardBatch

    table = list(range(BLOCKS))
    cache = model.make_cache(BLOCKS, BLOCK_SIZE)
    model(ForwardBatch.single([1, 2, 3, 4], 0, table, BLOCK_SIZE), cache)
    profile = cProfile.Profile()
    profile.enable()
    backend.download(model(ForwardBatch.single([5], 4, table, BLOCK_SIZE), cache))
    profile.disable()
    return pstats.Stats(profile).total_calls


def main() -> None:
    from blazr.backends import get_backend

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["gemma3", "qwen3", "gemma2", "olmo2", "cohere"])
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    backend = get_backend("cpu")
    print(
        f"# {platform.processor() or platform.machine()}, {args.layers} layers, hidden 64, one thread of Python"
    )
    llama = build("llama", args.layers, backend)
    decode_steps(llama, backend, 20)  # warm: the first steps compile kernels and fill caches
    llama_calls = calls_per_step(llama, backend)
    print("| family | ms / step | llama ms / step | ratio | Python calls / step | llama calls | ratio |")
    print("|---|---|---|---|---|---|---|")
    for family in args.families:
        model = build(family, args.layers, backend)
        decode_steps(model, backend, 20)  # warm both (numba compiles, caches allocate)
        decode_steps(llama, backend, 20)
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(decode_steps(model, backend, args.steps))
            theirs.append(decode_steps(llama, backend, args.steps))
        a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        calls = calls_per_step(model, backend)
        print(
            f"| {family} | {a:.3f} | {b:.3f} | {a / b:.2f}x | {calls} | {llama_calls} | {calls / llama_calls:.2f}x |"
        )


if __name__ == "__main__":
    main()
