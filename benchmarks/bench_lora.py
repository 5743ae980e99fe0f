"""LoRA adapter cost: decode tok/s with and without an adapter, blazr beside llama.cpp on the same files.

python benchmarks/bench_lora.py MODEL.gguf [--rank 16] [--rounds 3] [--threads 2]
    [--llama-python .venv-bench/bin/python]

Writes a random rank-`--rank` LoRA adapter for MODEL's shapes on every linear layer of every block (q, k, v, o,
gate, up, down) as a llama.cpp GGUF adapter (general.type "adapter", adapter.type "lora"), which both runtimes
read. Each measurement runs in a fresh process (this file's `worker` mode): one greedy sequence of 128 decode
steps after a short prompt, EOS ignored; best of `--rounds`, alternating the order. blazr also runs four
sequences in one batch, two with the adapter and two without, against four without (the mixed-batch cost).
Prints each runtime's with/without ratio and blazr's speed over llama.cpp's with the adapter.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = [504, 3575, 282, 4649, 314]
DECODE_TOKENS = 128
TARGETS = {  # GGUF tensor -> (rows, cols) from the model's sizes
    "attn_q": ("q", "d"),
    "attn_k": ("kv", "d"),
    "attn_v": ("kv", "d"),
    "attn_output": ("d", "q"),
    "ffn_gate": ("f", "d"),
    "ffn_up": ("f", "d"),
    "ffn_down": ("d", "f"),
}


def write_adapter(model: Path, out: Path, rank: int) -> None:
    """A random adapter (A ~ N(0, 1/K), B ~ N(0, 0.02^2)) for every block's linear layers of `model`."""
    import gguf

    from blazr.loaders.gguf import read_gguf

    meta = read_gguf(model).metadata
    arch = meta["general.architecture"]
    d, blocks = meta[f"{arch}.embedding_length"], meta[f"{arch}.block_count"]
    heads, kv_heads = meta[f"{arch}.attention.head_count"], meta[f"{arch}.attention.head_count_kv"]
    dh = meta.get(f"{arch}.attention.key_length", d // heads)
    sizes = {"d": d, "q": heads * dh, "kv": kv_heads * dh, "f": meta[f"{arch}.feed_forward_length"]}
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(out, arch)
    writer.add_type("adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(2 * rank))
    for i in range(blocks):
        for name, (rows, cols) in TARGETS.items():
            n, k = sizes[rows], sizes[cols]
            a = (rng.standard_normal((rank, k)) / np.sqrt(k)).astype(np.float32)  # (r, K)
            b = (0.02 * rng.standard_normal((n, rank))).astype(np.float32)  # (N, r)
            writer.add_tensor(f"blk.{i}.{name}.weight.lora_a", a)
            writer.add_tensor(f"blk.{i}.{name}.weight.lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def blazr_decode(model: str, adapter: str | None, threads: int, mixed: bool) -> float:
    """Decode tok/s: one sequence, or (mixed) four sequences of which the first two use the adapter."""
    import blazr
    from blazr.engine import SamplingParams

    n = 4 if mixed else 1
    engine = blazr.load(model, num_ctx=1024, max_seqs=n, lora=adapter).engine
    names = [("default" if adapter and (not mixed or i < 2) else None) for i in range(n)]

    def run(tokens: int) -> float:
        for i, name in enumerate(names):
            params = SamplingParams(
                max_tokens=tokens + 1, temperature=0.0, ignore_eos=True, lora_adapter=name
            )
            engine.add_request(f"r{i}-{time.perf_counter_ns()}", PROMPT + [100 + i], params)
        engine.step()  # the prompts
        start, generated = time.perf_counter(), 0
        while engine.has_unfinished():
            generated += sum(len(o.token_ids) for o in engine.step())
        return generated / (time.perf_counter() - start)

    run(4)  # warm-up: kernels compiled, pages touched
    return run(DECODE_TOKENS)


def llama_cpp_decode(model: str, adapter: str | None, threads: int) -> float:
    from llama_cpp import Llama

    kwargs = {"lora_path": adapter} if adapter else {}
    llm = Llama(model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False, **kwargs)

    def next_token() -> int:
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        return int(np.argmax(logits))

    llm.eval(PROMPT)
    token = next_token()
    for _ in range(4):  # warm-up
        llm.eval([token])
        token = next_token()
    start = time.perf_counter()
    for _ in range(DECODE_TOKENS):
        llm.eval([token])
        token = next_token()
    return DECODE_TOKENS / (time.perf_counter() - start)


def worker(argv: list[str]) -> None:
    runtime, model, adapter, threads, mixed = argv[0], argv[1], argv[2], int(argv[3]), argv[4] == "mixed"
    adapter_path = None if adapter == "none" else adapter
    if runtime == "blazr":
        rate = blazr_decode(model, adapter_path, threads, mixed)
    else:
        rate = llama_cpp_decode(model, adapter_path, threads)
    print(json.dumps({"decode_tok_s": rate}))


def measure(python: str, runtime: str, model: Path, adapter: Path | None, threads: int, mixed=False) -> float:
    cmd = [python, __file__, "worker", runtime, str(model), str(adapter or "none"), str(threads)]
    run = subprocess.run([*cmd, "mixed" if mixed else "single"], capture_output=True, text=True, timeout=1800)
    if run.returncode:
        raise SystemExit(f"{runtime} failed: {run.stderr.strip().splitlines()[-1:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])["decode_tok_s"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-python", default=".venv-bench/bin/python")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        adapter = Path(tmp) / "adapter.gguf"
        write_adapter(args.model, adapter, args.rank)
        print(
            f"adapter: rank {args.rank}, {adapter.stat().st_size / 2**20:.1f} MiB, every block's 7 linear layers"
        )
        cases = {
            "blazr": (sys.executable, "blazr", None, False),
            "blazr+lora": (sys.executable, "blazr", adapter, False),
            "blazr 4 seqs": (sys.executable, "blazr", None, True),
            "blazr 4 seqs, 2 with lora": (sys.executable, "blazr", adapter, True),
            "llama.cpp": (args.llama_python, "llama.cpp", None, False),
            "llama.cpp+lora": (args.llama_python, "llama.cpp", adapter, False),
        }
        best = dict.fromkeys(cases, 0.0)
        for rnd in range(args.rounds):
            for name in list(cases)[:: 1 if rnd % 2 == 0 else -1]:
                python, runtime, path, mixed = cases[name]
                rate = measure(python, runtime, args.model, path, args.threads, mixed)
                best[name] = max(best[name], rate)
                print(f"round {rnd}: {name:26s} {rate:7.1f} tok/s", flush=True)
    for name, rate in best.items():
        print(f"{name:26s} {rate:7.1f} tok/s (best of {args.rounds})")
    print(f"blazr with/without adapter:      {best['blazr+lora'] / best['blazr']:.2f}x")
    print(f"blazr mixed batch / plain batch: {best['blazr 4 seqs, 2 with lora'] / best['blazr 4 seqs']:.2f}x")
    print(f"llama.cpp with/without adapter:  {best['llama.cpp+lora'] / best['llama.cpp']:.2f}x")
    print(f"blazr+lora / llama.cpp+lora:     {best['blazr+lora'] / best['llama.cpp+lora']:.2f}x")


if __name__ == "__main__":
    main()
