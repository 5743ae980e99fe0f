"""Greedy agreement with a real model's float reference: blazr (float32 and int8 activations) and llama.cpp.

    python benchmarks/bench_agreement.py GOLDEN.npz FILE.gguf [--llama-python .venv-bench/bin/python]

GOLDEN.npz is the model's float reference (tests/golden/<model>_float.npz, made by
tests/parity/make_real_reference.py: transformers on the same GGUF dequantized in float32). For each of its
prompts this prints how many of the reference's greedy tokens each runtime reproduces before its first
difference, and the reference's margin (top-1 minus top-2 logit) at that step: a small margin is a near-tie,
where rounding decides. Not a test: llama.cpp is expected to part from the float run at near-ties.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
LLAMA_WORKER = """
import json, sys
from llama_cpp import Llama
path, prompts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
llm = Llama(model_path=path, n_ctx=512, n_threads=2, verbose=False, logits_all=False)
out = []
for ids in prompts:
    llm.reset()
    got = []
    for token in llm.generate(ids, top_k=1, temp=0.0, reset=True):
        got.append(int(token))
        if len(got) == n:
            break
    out.append(got)
print(json.dumps(out))
"""


def blazr_ids(path: Path, prompts: list[list[int]], n: int, int8: bool) -> list[list[int]]:
    """n greedy ids per prompt through the engine and sampler (never stopped by EOS)."""
    sys.path.insert(0, str(REPO))
    import blazr
    from blazr.engine.request import SamplingParams

    llm = blazr.load(str(path), device="cpu")
    llm.backend.set_int8_activations(int8)
    out = []
    for i, ids in enumerate(prompts):
        llm.engine.add_request(f"p{i}", ids, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
        got: list[int] = []
        while llm.engine.has_unfinished():
            for step in llm.engine.step():
                got += step.token_ids
        out.append(got)
    return out


def agreement(got: list[int], want: list[int], margins: np.ndarray) -> str:
    for step, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"{step} (margin {margins[step]:.3f})"
    return f"{min(len(got), len(want))}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("golden", type=Path)
    ap.add_argument("model", type=Path)
    ap.add_argument("--llama-python", default=str(REPO / ".venv-bench" / "bin" / "python"))
    args = ap.parse_args()
    golden = np.load(args.golden)
    count = len(golden["prompts"])
    prompts = [golden[f"prompt_ids_{i}"].tolist() for i in range(count)]
    want = [golden[f"ids_{i}"].tolist() for i in range(count)]
    margins = [golden[f"top_logits_{i}"][:, 0] - golden[f"top_logits_{i}"][:, 1] for i in range(count)]
    n = len(want[0])
    runs = {
        "blazr --dtype f32": blazr_ids(args.model, prompts, n, int8=False),
        "blazr default (int8)": blazr_ids(args.model, prompts, n, int8=True),
    }
    llama = subprocess.run(
        [args.llama_python, "-c", LLAMA_WORKER, str(args.model), json.dumps(prompts), str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    runs["llama.cpp"] = json.loads(llama.stdout)
    print(f"# tokens equal to the float reference before the first difference, of {n}, per prompt")
    for name, got in runs.items():
        cells = [agreement(g, w, m) for g, w, m in zip(got, want, margins, strict=True)]
        print(f"| {name} | " + " / ".join(cells) + " |")


if __name__ == "__main__":
    main()
