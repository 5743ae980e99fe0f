"""Make tests/golden/lora/<case>/: LoRA adapters written by the peft package for the tiny models, and what
transformers' PeftModel generates with them (reference.npz: greedy ids and float32 logits).

Each case's adapter is made by peft's own get_peft_model + save_pretrained (random A and B from a fixed torch
seed: init_lora_weights=False, so the update is not zero) on the tiny model's float32 weights, so blazr reads
the files peft writes. With --llama-cpp, the cases in GGUF_CASES are also converted by llama.cpp's own
convert_lora_to_gguf.py into <case>/adapter_f32.gguf. Needs torch, transformers and peft (not CI); from the repo
root:
    .venv-parity/bin/python tests/parity/make_lora_reference.py \\
        [--llama-cpp /tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp] [CASE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import peft
import torch
import transformers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "parity"))

from make_reference import build_hf_model  # noqa: E402

from tests.tiny_lora import CASES, GOLDEN  # noqa: E402
from tests.tiny_models import NEW_TOKENS, PROMPT_IDS, tiny_config, weights_digest, write_safetensors  # noqa: E402

GGUF_CASES = ("llama_all",)


@torch.no_grad()
def make_case(name: str) -> None:
    case = CASES[name]
    out = GOLDEN / name
    out.mkdir(parents=True, exist_ok=True)
    model = build_hf_model(case.base, "f32")
    torch.manual_seed(case.seed)
    config = peft.LoraConfig(init_lora_weights=False, **case.lora_config)
    peft_model = peft.get_peft_model(model, config)
    peft_model.save_pretrained(out)  # adapter_config.json + adapter_model.safetensors
    (out / "README.md").unlink(missing_ok=True)  # peft's empty model card
    reloaded = peft.PeftModel.from_pretrained(build_hf_model(case.base, "f32"), out).eval()

    prompt = torch.tensor([PROMPT_IDS])  # (1, P)
    gen = reloaded.generate(input_ids=prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    ids = gen[0, len(PROMPT_IDS) :].numpy().astype(np.int32)  # (N,)
    full = reloaded(input_ids=gen).logits[0].float().numpy()  # (P + N, V) one pass, no cache
    used = full[len(PROMPT_IDS) - 1 : -1]  # (N, V)
    if len(ids) != NEW_TOKENS or not np.array_equal(used.argmax(-1), ids):
        raise SystemExit(f"{name}: generate() ids are not the argmax of the logits")
    top2 = np.sort(used, axis=-1)[:, -2:]  # (N, 2)
    print(f"{name:18s} ids {ids[:8].tolist()}..  min greedy margin {np.min(top2[:, 1] - top2[:, 0]):.4f}")
    np.savez_compressed(
        out / "reference.npz",
        prompt_ids=np.asarray(PROMPT_IDS, dtype=np.int32),
        ids=ids,
        logits=full.astype(np.float32),
        weights_sha256=np.asarray(weights_digest(case.base, "f32")),
        versions=np.asarray(
            f"transformers {transformers.__version__}, torch {torch.__version__}, peft {peft.__version__}"
        ),
    )


def convert_gguf(name: str, llama_cpp: Path) -> None:
    """llama.cpp's convert_lora_to_gguf.py on the case's adapter, against the tiny base model's config."""
    case, out = CASES[name], GOLDEN / name
    with tempfile.TemporaryDirectory() as base:
        write_safetensors(case.base, base, "float32")
        vocab = {f"<t{i}>": i for i in range(tiny_config(case.base)["vocab_size"])}
        (Path(base) / "tokenizer.json").write_text(
            json.dumps({"model": {"vocab": vocab}, "added_tokens": []})
        )
        env = dict(os.environ, PYTHONPATH=f"{llama_cpp}:{llama_cpp / 'gguf-py'}")
        command = [sys.executable, str(llama_cpp / "convert_lora_to_gguf.py"), "--base", base]
        command += ["--outtype", "f32", "--outfile", str(out / "adapter_f32.gguf"), str(out)]
        subprocess.run(command, check=True, env=env)
    print(
        f"{(out / 'adapter_f32.gguf').relative_to(REPO)}: {(out / 'adapter_f32.gguf').stat().st_size} bytes"
    )


def main() -> None:
    torch.set_num_threads(1)  # reproducible summation order
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, help="llama.cpp source dir (the sdist's vendor/llama.cpp)")
    parser.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
    args = parser.parse_args()
    for name in args.cases or CASES:
        make_case(name)
        if args.llama_cpp is not None and name in GGUF_CASES:
            convert_gguf(name, args.llama_cpp)


if __name__ == "__main__":
    main()
