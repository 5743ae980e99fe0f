"""Make tests/golden/<name>_float.npz: the float reference of a real GGUF model the tests download
(smollm2_q4_1: SmolLM2-135M-Instruct Q4_1; gemma3_270m_q4_k_m: Gemma 3 270M Q4_K_M).

transformers loads the same file the tests download (`gguf_file=`, every tensor dequantized by `gguf`) and
generates greedily in float32. That is the model itself, independent of any CPU's summation order, so tests
can hold blazr's output to it on every machine. Per prompt it records the prompt ids, NEW_TOKENS greedy ids,
and per generated position the top-TOP logits with their ids, from which the tests read each step's margin
(top-1 minus top-2 logit): a step with a small margin is a recorded near-tie, after which a run whose
arithmetic differs (int8 activations, another SIMD width) may part from the reference legitimately.

Needs torch, transformers, accelerate and gguf (not needed by CI); see tests/parity/README.md. From the repo root:
    .venv-parity/bin/python tests/parity/make_real_reference.py smollm2_q4_1 \
        ~/.cache/blazr-test-models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
# A fact, code and a story.
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
NEW_TOKENS = 32
TOP = 16


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@torch.no_grad()
def reference(model, tokenizer, prompt: str) -> dict[str, np.ndarray]:
    prompt_ids = tokenizer(prompt)["input_ids"]  # with the BOS the model expects (Gemma), if any
    ids = list(prompt_ids)
    for _ in range(NEW_TOKENS):  # no KV cache: one full float32 pass per token, the plainest reference
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    full = model(torch.tensor([ids[:-1]])).logits[0, len(prompt_ids) - 1 :].float().numpy()  # (N, V)
    new = np.asarray(ids[len(prompt_ids) :], dtype=np.int32)  # (N,)
    if not np.array_equal(full.argmax(-1), new):
        raise SystemExit(f"{prompt!r}: the one-pass logits do not choose the generated ids")
    top_ids = np.argsort(-full, axis=-1, kind="stable")[:, :TOP].astype(np.int32)  # (N, TOP)
    top_logits = np.take_along_axis(full, top_ids, axis=-1).astype(np.float32)  # (N, TOP)
    margins = top_logits[:, 0] - top_logits[:, 1]
    print(f"{prompt!r}: {tokenizer.decode(new)!r}")
    print(f"    margins {np.round(margins, 3).tolist()}")
    return {
        "prompt_ids": np.asarray(prompt_ids, dtype=np.int32),
        "ids": new,
        "top_ids": top_ids,
        "top_logits": top_logits,
    }


def main() -> None:
    name, gguf_path = sys.argv[1], Path(sys.argv[2]).expanduser().resolve()
    torch.set_num_threads(1)  # reproducible summation order
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    out: dict[str, np.ndarray] = {
        "file_sha256": np.asarray(sha256(gguf_path)),
        "versions": np.asarray(f"transformers {transformers.__version__}, torch {torch.__version__}"),
    }
    for i, prompt in enumerate(PROMPTS):
        for key, value in reference(model, tokenizer, prompt).items():
            out[f"{key}_{i}"] = value
    out["prompts"] = np.asarray(PROMPTS)
    path = GOLDEN / f"{name}_float.npz"
    np.savez_compressed(path, **out)
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
