"""Whisper tiny.en speed on the CPU: blazr vs faster-whisper (CTranslate2, float32 and int8) vs transformers'
`WhisperForConditionalGeneration.generate`, same weights, same audio, same threads, one run each.

    python benchmarks/bench_whisper.py [--model whisper-tiny.en] [--threads 2] [--clips 60 600]
        [--decodes greedy beam5] [--peer-python .venv-parity/bin/python] [--only blazr fw-f32 ...]
        [--retries 2] [--max-other 0.1] [--quiet-wait 120] [--json FILE]

The clips are the committed espeak-ng speech set (tests/data/speech) cycled with 1 s of silence between
sentences until the next sentence would not fit, then padded with silence to exactly 60 s and 600 s. Every
runtime runs openai-whisper's long-form algorithm with the same options: language "en", temperature fallback
0.0-1.0 (compression ratio 2.4, log-prob -1.0, no-speech 0.6), conditioning on the previous text, and either
greedy decoding or beam search with 5 beams (best_of 5 when sampling); no VAD.

Each (runtime, decoding, clip) runs in its own process (faster-whisper and transformers live in the parity
environment): it loads the model, transcribes one sentence to warm up (kernel compiles, allocator growth),
then the clip once. A cell starts when nothing else is runnable on the machine, and is rerun (--retries) when
other processes used more than --max-other CPU cores while it ran (from /proc/stat less the cell's own CPU
time): on a shared 2-core machine one other busy process makes 2-thread BLAS / OpenMP pools collapse 5-30x.
The table reports what others took during the run kept.

faster-whisper reads the catalog's CTranslate2 directory (float16 weights) at compute_type float32 or int8;
transformers reads the same weights converted to a Hugging Face directory (blazr's CTranslate2 reader, saved
with save_pretrained) in float32, with a generation config holding tiny.en's special tokens. Threads: 2 by
default for everyone (OMP_NUM_THREADS and NUMBA_NUM_THREADS in the environment, ctranslate2 cpu_threads,
torch.set_num_threads). Prints the real-time factor (audio seconds / wall seconds), the wall seconds, the word
error rate against the spoken sentences (tests/wer.py, a sanity check that every runtime did the work) and
blazr / peer speed ratios; the speech issue targets >= 1.0x faster-whisper at the same precision and >= 3x
transformers.
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
from tests.wer import word_errors  # noqa: E402

GAP = 1.0  # seconds of silence between sentences
BEAMS = {"greedy": 1, "beam5": 5}


def speech_clip(seconds: float) -> tuple[np.ndarray, str]:
    """`seconds` of the speech set cycled with GAP silences, whole sentences only, padded with silence:
    float32 (samples,) at 16 kHz, and the text spoken."""
    rate, total = speech_set.RATE, round(seconds * speech_set.RATE)
    gap = np.zeros(round(GAP * rate), dtype=np.float32)  # (gap,)
    pieces: list[np.ndarray] = []
    texts: list[str] = []
    at, i = 0, 0
    while True:
        clip = speech_set.load(i % len(speech_set.sentences()))  # (samples,)
        need = clip.size + (gap.size if pieces else 0)
        if at + need > total:
            break
        if pieces:
            pieces.append(gap)
        pieces.append(clip)
        texts.append(speech_set.sentences()[i % len(speech_set.sentences())])
        at += need
        i += 1
    pieces.append(np.zeros(total - at, dtype=np.float32))
    return np.concatenate(pieces), " ".join(texts)


# ---- workers (each in its own process) ------------------------------------------------------------------


def timed_runs(transcribe, clips: list[float]) -> dict:
    """Warm up on one sentence, then transcribe each clip once."""
    start = time.perf_counter()
    transcribe(speech_set.load(0))
    out: dict = {"warmup_s": time.perf_counter() - start, "clips": {}}
    for seconds in clips:
        audio, spoken = speech_clip(seconds)
        start = time.perf_counter()
        text = transcribe(audio)
        wall = time.perf_counter() - start
        errors, words = word_errors(spoken, text)
        out["clips"][str(seconds)] = {"wall_s": wall, "rtf": seconds / wall, "wer": errors / words}
    return out


def worker_blazr(args) -> dict:
    from blazr.tasks.transcribe import Transcriber

    start = time.perf_counter()
    model = Transcriber.load(args.model_path)
    load = time.perf_counter() - start
    beam = None if args.decode == "greedy" else BEAMS[args.decode]

    def transcribe(audio: np.ndarray) -> str:
        return model.transcribe(audio, language="en", beam_size=beam).text

    return {"load_s": load, **timed_runs(transcribe, args.clips), "detail": "float32, cpu backend"}


def worker_fw(args, compute_type: str) -> dict:
    import ctranslate2
    import faster_whisper
    from faster_whisper import WhisperModel

    start = time.perf_counter()
    model = WhisperModel(args.model_path, device="cpu", compute_type=compute_type, cpu_threads=args.threads)
    load = time.perf_counter() - start

    def transcribe(audio: np.ndarray) -> str:
        segments, _ = model.transcribe(audio, beam_size=BEAMS[args.decode], language="en", vad_filter=False)
        return "".join(s.text for s in segments)  # the generator decodes as it is read

    detail = (
        f"{compute_type}, faster-whisper {faster_whisper.__version__}, CTranslate2 {ctranslate2.__version__}"
    )
    return {"load_s": load, **timed_runs(transcribe, args.clips), "detail": detail}


def hf_directory(model_path: str, out: Path) -> None:
    """The CTranslate2 checkpoint as a Hugging Face Whisper directory (float32) with tiny.en's generation
    config (the special token ids from blazr's vocabulary rules, the suppress lists from the CT2 config)."""
    import torch
    import transformers
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    from blazr.loaders.whisper_formats import read_whisper_checkpoint
    from blazr.tasks.whisper_vocab import WhisperVocabulary

    config, weights = read_whisper_checkpoint(model_path)
    keys = set(WhisperConfig().to_dict())
    hf_config = WhisperConfig(**{k: v for k, v in config.items() if k in keys and k != "torch_dtype"})
    model = WhisperForConditionalGeneration(hf_config)
    state = {k: torch.from_numpy(v.astype(np.float32)) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"proj_out.weight"}, (missing, unexpected)  # proj_out is tied
    v = WhisperVocabulary(config["vocab_size"])
    model.generation_config = GenerationConfig(
        decoder_start_token_id=v.sot,
        bos_token_id=v.sot,
        eos_token_id=v.eot,
        pad_token_id=v.eot,
        no_timestamps_token_id=v.no_timestamps,
        prev_sot_token_id=v.sot_prev,
        max_initial_timestamp_index=50,  # openai-whisper's 1.0 s
        max_length=config["max_target_positions"],
        is_multilingual=v.multilingual,
        suppress_tokens=config["suppress_tokens"],
        begin_suppress_tokens=config["begin_suppress_tokens"],
        alignment_heads=config["alignment_heads"],
    )
    model.save_pretrained(out)
    (out / "converted_by.txt").write_text(f"transformers {transformers.__version__}\n")


def worker_hf(args) -> dict:
    import tokenizers
    import torch
    import transformers
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        hf_directory(args.model_path, Path(tmp))
        start = time.perf_counter()
        model = WhisperForConditionalGeneration.from_pretrained(tmp, dtype=torch.float32).eval()
        load = time.perf_counter() - start
    features = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    tokenizer = tokenizers.Tokenizer.from_file(str(Path(args.model_path) / "tokenizer.json"))
    beams = BEAMS[args.decode]

    def transcribe(audio: np.ndarray) -> str:
        # long-form: the whole recording's features, not cut at 30 s, with its attention mask; generate()
        # then runs openai-whisper's sequential algorithm (seek, timestamps, fallback, previous text)
        inputs = features(
            audio,
            sampling_rate=16000,
            return_tensors="pt",
            truncation=False,
            padding="longest",
            return_attention_mask=True,
        )
        if inputs.input_features.shape[-1] < 3000:  # a short clip: one padded 30 s window
            inputs = features(audio, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        with torch.inference_mode():
            ids = model.generate(
                inputs.input_features,
                attention_mask=inputs.attention_mask,
                return_timestamps=True,
                num_beams=beams,
                temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                compression_ratio_threshold=2.4,
                logprob_threshold=-1.0,
                no_speech_threshold=0.6,
                condition_on_prev_tokens=True,
            )
        return tokenizer.decode(ids[0].tolist(), skip_special_tokens=True)

    detail = f"float32, transformers {transformers.__version__}, torch {torch.__version__}"
    return {"load_s": load, **timed_runs(transcribe, args.clips), "detail": detail}


WORKERS = {
    "blazr": worker_blazr,
    "fw-f32": lambda args: worker_fw(args, "float32"),
    "fw-int8": lambda args: worker_fw(args, "int8"),
    "transformers": worker_hf,
}
PEER_RUNTIMES = ("fw-f32", "fw-int8", "transformers")


# ---- driver ---------------------------------------------------------------------------------------------


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat), to see what else ran."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(limit_s: float) -> None:
    """Start only when nothing else is runnable (the 4th field of /proc/loadavg counts this process) for 3 s
    in a row, or after limit_s: on a 2-core machine one other busy process halves a 2-thread run's cores and
    makes spinning thread pools collapse."""
    deadline, calm = time.time() + limit_s, 0
    while time.time() < deadline and calm < 3:
        calm = calm + 1 if int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) <= 1 else 0
        time.sleep(1)


def run_worker(python: str, runtime: str, decode: str, seconds: float, args) -> dict:
    """One clip in a fresh process; rerun (up to --retries times) when other processes took more than
    --max-other CPU cores on average while it ran, keeping the least disturbed run."""
    cmd = [python, __file__, "--worker", runtime, "--decode", decode, "--model", args.model_path]
    cmd += ["--threads", str(args.threads), "--clips", str(seconds)]
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "NUMBA_NUM_THREADS": threads}
    best: dict | None = None
    for _ in range(1 + args.retries):
        wait_for_quiet(args.quiet_wait)
        busy, mine, start = busy_seconds(), children_cpu(), time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, env=env, cwd=REPO)
        wall = time.perf_counter() - start
        if run.returncode:
            tail = run.stderr.strip().splitlines()[-1:] or ["failed"]
            return {"error": tail[0]}
        result = json.loads(run.stdout.strip().splitlines()[-1])
        result["other_cores"] = max(0.0, (busy_seconds() - busy) - (children_cpu() - mine)) / wall
        if best is None or result["other_cores"] < best["other_cores"]:
            best = result
        if result["other_cores"] <= args.max_other:
            break
    return best


def children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="whisper-tiny.en", help="catalog name or CTranslate2 directory")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clips", type=float, nargs="+", default=[60.0, 600.0], help="clip lengths (s)")
    ap.add_argument("--decodes", nargs="+", choices=sorted(BEAMS), default=["greedy", "beam5"])
    ap.add_argument("--only", nargs="+", choices=sorted(WORKERS), default=sorted(WORKERS))
    ap.add_argument("--peer-python", default=str(REPO / ".venv-parity" / "bin" / "python"))
    ap.add_argument("--json", help="also write every result to this file")
    ap.add_argument("--retries", type=int, default=2, help="reruns of a cell another process disturbed")
    ap.add_argument("--max-other", type=float, default=0.1, help="CPU cores others may use during a cell")
    ap.add_argument("--quiet-wait", type=float, default=120, help="seconds to wait for a quiet machine")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--decode", choices=sorted(BEAMS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.model_path = args.model
        print(json.dumps(WORKERS[args.worker](args)))
        return
    from blazr.model_dir import resolve_model

    args.model_path = str(resolve_model(args.model))  # the peers need the directory itself
    results: dict[tuple[str, str, float], dict] = {}
    for seconds in args.clips:
        for decode in args.decodes:
            for runtime in args.only:
                python = args.peer_python if runtime in PEER_RUNTIMES else sys.executable
                r = results[runtime, decode, seconds] = run_worker(python, runtime, decode, seconds, args)
                print(f"# {runtime} {decode} {seconds:g}: {json.dumps(r)}", file=sys.stderr, flush=True)
                if args.json:
                    rows = {f"{rt} {d} {s:g}": v for (rt, d, s), v in results.items()}
                    Path(args.json).write_text(json.dumps(rows, indent=1))

    coretype = os.environ.get("OPENBLAS_CORETYPE", "unset")
    print(
        f"whisper tiny.en, {args.threads} threads, OPENBLAS_CORETYPE {coretype}, "
        f"load average {load_average()}"
    )
    print(
        "| clip | decoding | runtime | RTF (audio s / wall s) | wall s | WER | blazr / runtime speed "
        "| others' CPU (cores) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for seconds in args.clips:
        for decode in args.decodes:
            ours = results.get(("blazr", decode, seconds), {}).get("clips", {}).get(str(seconds))
            for runtime in args.only:
                r = results[runtime, decode, seconds]
                if "error" in r:
                    print(f"| {seconds:g} s | {decode} | {runtime} | - | - | - | {r['error']} | |")
                    continue
                c = r["clips"][str(seconds)]
                ratio = f"{ours['rtf'] / c['rtf']:.2f}x" if ours else "-"
                print(
                    f"| {seconds:g} s | {decode} | {runtime} | {c['rtf']:.2f} | {c['wall_s']:.2f} | "
                    f"{c['wer']:.3f} | {ratio} | {r['other_cores']:.2f} |"
                )
    for (runtime, decode, seconds), r in results.items():
        if "error" not in r:
            print(
                f"{runtime} {decode} {seconds:g} s: {r['detail']}; load {r['load_s']:.2f} s, "
                f"warm-up {r['warmup_s']:.2f} s"
            )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
