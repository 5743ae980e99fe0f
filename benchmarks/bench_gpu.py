"""GPU benchmark for the WGSL backend: `blazr bench` on shape-real models beside PyTorch on the same GPU.

python benchmarks/bench_gpu.py [--shape 1b] [--types F16 Q4_K_M] [--device wgpu] [--torch-device cuda]
                               [--torch-python PYTHON] [--prompt-tokens 128] [--decode-tokens 64] [--out DIR]

For each type it writes the model once (benchmarks/make_shape_models.py: random weights, real shapes), runs
`blazr bench` (decode and prefill tok/s, share of the memory-bandwidth floor measured on the device,
dispatches and host encode time per decode step) and, for F16, the same Llama shape in PyTorch
(transformers' LlamaForCausalLM in float16 with its KV cache, greedy, in a separate interpreter: the one that
has torch) with its own floor from a device copy. It prints one markdown table. The issue's targets on a
real GPU: decode >= 60% of the floor for F16 and Q4_K, host encode <= 20% of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")

TORCH_CODE = r"""
import json, sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
shape, device, prompt, decode = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = LlamaConfig(hidden_size=shape["hidden"], intermediate_size=shape["ffn"], num_hidden_layers=shape["layers"],
                  num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"], vocab_size=shape["vocab"],
                  tie_word_embeddings=True, max_position_embeddings=4096)
dtype = torch.float16 if device != "cpu" else torch.float32
model = LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
def sync():
    if device != "cpu":
        torch.cuda.synchronize()
def run():
    ids = torch.randint(3, shape["vocab"], (1, prompt), device=device)
    with torch.inference_mode():
        sync(); t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True); sync(); t1 = time.perf_counter()
        past = out.past_key_values
        for _ in range(decode - 1):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        sync(); t2 = time.perf_counter()
    return prompt / (t1 - t0), (decode - 1) / (t2 - t1)
run()
prefill, dec = zip(*[run() for _ in range(3)])
weights = sum(p.numel() * p.element_size() for p in model.parameters())
src = torch.empty(1 << 28, dtype=torch.uint8, device=device); dst = torch.empty_like(src)
best = float("inf")
for _ in range(5):
    sync(); t0 = time.perf_counter(); dst.copy_(src); sync(); best = min(best, time.perf_counter() - t0)
bandwidth = 2 * src.numel() / best
print(json.dumps({"prefill": sorted(prefill)[1], "decode": sorted(dec)[1], "weights": weights, "bandwidth": bandwidth}))
"""


def make_model(out: Path, shape: str, mix: str) -> Path:
    path = out / f"shape-{shape}.{mix}.gguf"
    if not path.exists():
        cmd = [
            sys.executable,
            str(HERE / "make_shape_models.py"),
            str(out),
            "--models",
            shape,
            "--types",
            mix,
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return path


def blazr_bench(path: Path, device: str, prompt: int, decode: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "bench.json"
        cmd = [sys.executable, "-m", "blazr", "bench", str(path), "--device", device, "--runs", "2"]
        cmd += ["--prompt-tokens", str(prompt), "--decode-tokens", str(decode), "--json", str(report)]
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        data = json.loads(report.read_text())
    result = data["results"][0]
    step = result.get("per_decode_step", {})
    decode_tps = result["decode_tok_per_sec"]["median"]
    return {
        "prefill": result["prefill_tok_per_sec"]["median"],
        "decode": decode_tps,
        "floor": result["bandwidth_floor_fraction"],
        "dispatches": step.get("dispatches"),
        "encode_share": step["encode_ns"] / 1e9 * decode_tps if "encode_ns" in step else None,
        "bandwidth": data["bandwidth"]["copy_bytes_per_sec"],
    }


def torch_bench(python: str, shape: dict, device: str, prompt: int, decode: int) -> dict:
    cmd = [python, "-c", TORCH_CODE, json.dumps(shape), device, str(prompt), str(decode)]
    found = json.loads(
        subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    )
    found["floor"] = found["weights"] / found["bandwidth"] * found["decode"]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1b")
    ap.add_argument("--types", nargs="+", default=["F16", "Q4_K_M"])
    ap.add_argument("--device", default="wgpu")
    ap.add_argument("--torch-device", default="cuda", help="'none' skips PyTorch")
    ap.add_argument("--torch-python", default=sys.executable, help="an interpreter with torch + transformers")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=CACHE / "blazr-bench" / "shapes")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from make_shape_models import SHAPES

    args.out.mkdir(parents=True, exist_ok=True)
    print(
        "| runtime | model | prefill tok/s | decode tok/s | % of floor | dispatches / step | host encode |"
    )
    print("|---|---|---|---|---|---|---|")
    for mix in args.types:
        path = make_model(args.out, args.shape, mix)
        r = blazr_bench(path, args.device, args.prompt_tokens, args.decode_tokens)
        encode = f"{100 * r['encode_share']:.0f}%" if r["encode_share"] is not None else "-"
        print(
            f"| blazr {args.device} | {path.name} | {r['prefill']:.1f} | {r['decode']:.2f} | "
            f"{100 * r['floor']:.0f}% | {r['dispatches'] or '-'} | {encode} |"
        )
    if args.torch_device != "none":
        t = torch_bench(
            args.torch_python, SHAPES[args.shape], args.torch_device, args.prompt_tokens, args.decode_tokens
        )
        dtype = "F16" if args.torch_device != "cpu" else "F32"
        print(
            f"| PyTorch {args.torch_device} | {args.shape} {dtype} | {t['prefill']:.1f} | {t['decode']:.2f} | "
            f"{100 * t['floor']:.0f}% | - | - |"
        )


if __name__ == "__main__":
    main()
