"""Piper voice speed on the CPU: blazr's VITS vs Piper's own path (onnxruntime running the voice's ONNX file),
same voice, same phoneme ids, same threads, one run each.

    python benchmarks/bench_tts.py [--voice piper-joe] [--threads 2] [--peer-python .venv-parity/bin/python]
        [--device cpu] [--rounds 3] [--json FILE]

The 20 sentences of the committed speech set (tests/data/speech/sentences.txt) are read to phoneme ids once
(blazr's espeak-ng reading, the same ids for both), then each runtime synthesizes them one sentence at a time
with the voice's own noise settings (noise 0.667, length 1, noise_w 0.8), after one warm-up sentence (kernel
compiles, allocator growth). onnxruntime runs in the parity environment (--peer-python) with
intra_op_num_threads = --threads; blazr with NUMBA_NUM_THREADS / OMP_NUM_THREADS = --threads.

The runtimes take turns, --rounds times (a fresh onnxruntime process each round): on a shared virtual
machine the CPU's speed drifts by 10% over a minute, so a ratio is taken within a round, from runs seconds
apart, and the median round is the result.

Prints the real-time factor of each (seconds of compute per second of audio: lower is faster), the speed
ratio blazr / onnxruntime (the issue's target: >= 1.0x), and blazr's time to the first audio chunk of a
one-sentence streamed input (target <= 0.3 s). Run it on a quiet machine: on a shared 2-core machine another
busy process makes the thread pools collapse.
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

from tests import speech_set  # noqa: E402

PEER = r"""
import json, sys, time
import numpy as np, onnxruntime
job = json.load(open(sys.argv[1]))
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = job["threads"]
options.inter_op_num_threads = 1
session = onnxruntime.InferenceSession(job["onnx"], options, providers=["CPUExecutionProvider"])
scales = np.array(job["scales"], dtype=np.float32)
def run(ids):
    feeds = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
             "scales": scales}
    return session.run(None, feeds)[0].size
run(job["warmup"])
start = time.perf_counter()
samples = sum(run(ids) for ids in job["ids"])
print(json.dumps({"seconds": time.perf_counter() - start, "samples": samples}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voice", default="piper-joe")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-python", default=str(REPO / ".venv-parity" / "bin" / "python"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3, help="turns each runtime takes, alternating")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    os.environ["NUMBA_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)

    from blazr.tasks.speak import Synthesizer

    synth = Synthesizer.load(args.voice, device=args.device)
    texts = list(speech_set.sentences())
    ids = [synth.ids(p).tolist() for t in texts for p in synth.phonemize(t)]
    warmup = synth.ids(synth.phonemize("A warm-up sentence.")[0]).tolist()
    rng = np.random.default_rng(0)
    scales = (synth.noise_scale, synth.length_scale, synth.noise_w)

    def blazr_run(one: list[int]) -> int:
        return len(synth.model.synthesize(np.array(one), scales[0], scales[1], scales[2], rng))

    blazr_run(warmup)
    start = time.perf_counter()
    next(iter(synth.stream("This is one sentence, streamed.", seed=0)))
    first_chunk = time.perf_counter() - start

    onnx_path = next(Path(synth.path).glob("*.onnx")) if Path(synth.path).is_dir() else Path(synth.path)
    job = {"onnx": str(onnx_path), "threads": args.threads, "scales": scales, "ids": ids, "warmup": warmup}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    rounds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        samples = sum(blazr_run(one) for one in ids)
        blazr = {"seconds": time.perf_counter() - start, "samples": samples}
        out = subprocess.run([args.peer_python, "-c", PEER, f.name], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"onnxruntime run failed:\n{out.stderr}")
        rounds.append((blazr, json.loads(out.stdout.strip().splitlines()[-1])))
    os.unlink(f.name)
    ratios = [peer["seconds"] / ours["seconds"] for ours, peer in rounds]
    blazr, peer = rounds[int(np.argsort(ratios)[len(ratios) // 2])]  # the median round

    rate = synth.sample_rate
    rows = {"blazr": blazr, "onnxruntime": peer}
    print(
        f"{len(ids)} sentences, threads {args.threads}, device {args.device}, median of {args.rounds} rounds"
    )
    for name, r in rows.items():
        audio = r["samples"] / rate
        r["audio_seconds"], r["rtf"] = audio, r["seconds"] / audio
        print(f"  {name:12s} {r['seconds']:6.2f} s for {audio:5.1f} s of audio  RTF {r['rtf']:.3f}")
    ratio = peer["seconds"] / blazr["seconds"]
    listed = " ".join(f"{r:.2f}x" for r in ratios)
    print(f"  blazr / onnxruntime speed: {ratio:.2f}x (target >= 1.0x); rounds {listed}")
    print(f"  blazr time to first streamed chunk (one sentence): {first_chunk:.3f} s (target <= 0.3 s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps({**rows, "ratio": ratio, "rounds": ratios, "first_chunk_s": first_chunk}, indent=1)
        )


if __name__ == "__main__":
    main()
