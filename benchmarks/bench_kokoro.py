"""Kokoro-82M speed on the CPU: blazr (the int8 export's weights dequantized, run in float32 on blazr's
backend) vs onnxruntime running the same int8 ONNX file (kokoro-onnx's path), same phoneme ids, same voice
pack rows, same threads, one run each.

    python benchmarks/bench_kokoro.py [--model kokoro-ja] [--voice jf_alpha] [--threads 2]
        [--peer-python .venv-parity/bin/python] [--device cpu] [--json FILE]

The ten Japanese sentences below are read to phoneme ids once by blazr (misaki, Kokoro's own G2P), then each
runtime synthesizes them one sentence at a time at speed 1 after one warm-up sentence (kernel compiles,
allocator growth). onnxruntime runs in the parity environment (--peer-python, with onnxruntime) with
intra_op_num_threads = --threads; blazr with NUMBA_NUM_THREADS / OMP_NUM_THREADS = --threads. onnxruntime
also quantizes activations to int8 (dynamic quantization's MatMulInteger / ConvInteger), blazr computes in
float32: the same network, not the same arithmetic.

Prints each runtime's real-time factor (seconds of compute per second of audio: lower is faster), the speed
ratio blazr / onnxruntime and blazr's time to the first streamed sentence. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SENTENCES = [
    "今日はいい天気ですね。",
    "駅までの道を教えてください。",
    "この本はとても面白かったです。",
    "明日の会議は午後三時に始まります。",
    "私は毎朝コーヒーを飲みます。",
    "新しいレストランに行ってみませんか。",
    "電車が遅れているので、少し待ちましょう。",
    "週末は家族と一緒に山に登りました。",
    "このお店は何時まで開いていますか。",
    "ありがとうございました、また来てください。",
]

PEER = r"""
import json, sys, time
import numpy as np, onnxruntime
job = json.load(open(sys.argv[1]))
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = job["threads"]
options.inter_op_num_threads = 1
session = onnxruntime.InferenceSession(job["onnx"], options, providers=["CPUExecutionProvider"])
def run(ids, style):
    feeds = {"tokens": np.array([ids], dtype=np.int64), "style": np.array(style, dtype=np.float32),
             "speed": np.array([1.0], dtype=np.float32)}
    return session.run(None, feeds)[0].size
run(job["warmup"], job["warmup_style"])
start = time.perf_counter()
samples = sum(run(ids, style) for ids, style in zip(job["ids"], job["styles"]))
print(json.dumps({"seconds": time.perf_counter() - start, "samples": samples}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="kokoro-ja")
    parser.add_argument("--voice", default="jf_alpha")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-python", default=str(REPO / ".venv-parity" / "bin" / "python"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    os.environ["NUMBA_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)

    from blazr.loaders.kokoro import style_for
    from blazr.model_dir import resolve_model
    from blazr.tasks.speak import Synthesizer

    synth = Synthesizer.load(resolve_model(args.model, pull=True), device=args.device)
    pack = synth.pack(synth.voice(args.voice).id)
    ids = [synth.ids(p) for t in SENTENCES for p in synth.phonemize(t, args.voice)]
    styles = [style_for(pack, len(one) - 2) for one in ids]  # (1, 256) each
    warmup = synth.ids(synth.phonemize("こんにちは。", args.voice)[0])
    rng = np.random.default_rng(0)

    def blazr_run(one: np.ndarray, style: np.ndarray) -> int:
        return len(synth.model.synthesize(one, style, 1.0, noise=True, rng=rng))

    blazr_run(warmup, style_for(pack, len(warmup) - 2))
    start = time.perf_counter()
    samples = sum(blazr_run(one, style) for one, style in zip(ids, styles, strict=True))
    blazr = {"seconds": time.perf_counter() - start, "samples": samples}

    start = time.perf_counter()
    next(iter(synth.stream(SENTENCES[0], args.voice, seed=0)))
    first_sentence = time.perf_counter() - start

    job = {
        "onnx": str(synth.path),
        "threads": args.threads,
        "ids": [one.tolist() for one in ids],
        "styles": [s.tolist() for s in styles],
        "warmup": warmup.tolist(),
        "warmup_style": style_for(pack, len(warmup) - 2).tolist(),
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run([args.peer_python, "-c", PEER, f.name], capture_output=True, text=True, env=env)
    os.unlink(f.name)
    if out.returncode != 0:
        sys.exit(f"onnxruntime run failed:\n{out.stderr}")
    peer = json.loads(out.stdout.strip().splitlines()[-1])

    rate = synth.sample_rate
    rows = {"blazr": blazr, "onnxruntime": peer}
    print(f"{len(ids)} sentences, voice {args.voice}, threads {args.threads}, device {args.device}")
    for name, r in rows.items():
        audio = r["samples"] / rate
        r["audio_seconds"], r["rtf"] = audio, r["seconds"] / audio
        print(f"  {name:12s} {r['seconds']:6.2f} s for {audio:5.1f} s of audio  RTF {r['rtf']:.3f}")
    ratio = peer["seconds"] / blazr["seconds"]
    print(f"  blazr / onnxruntime speed: {ratio:.2f}x")
    print(f"  blazr time to the first streamed sentence: {first_sentence:.3f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps({**rows, "ratio": ratio, "first_sentence_s": first_sentence}, indent=1)
        )


if __name__ == "__main__":
    main()
