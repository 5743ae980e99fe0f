"""`blazr bench`: prefill and decode speed of one model (features.md §1.2 and §2.3).

Per prompt length: 1 warmup run and --runs measured runs, greedy, exactly --decode-tokens tokens (EOS is
ignored) from a prompt of repeated "The quick brown fox ..." cut to the length. Reported as medians: prefill
tok/s, time to first token, decode tok/s = (tokens - 1) / (total - TTFT), inter-token latency, the share of
the memory-bandwidth floor the decode reaches (weight bytes per token ÷ the device's copy bandwidth, measured
here; bench_floor.py), and on a backend with counters (wgpu) the dispatches, submits, bytes read back and
host encode time per decode step.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from blazr.commands import options as o
from blazr.errors import ConfigError

BENCH_TEXT = "The quick brown fox jumps over the lazy dog. "
DEFAULT_PROMPT_TOKENS = (32, 128, 512)
COUNTERS = ("dispatches", "submits", "bytes_read", "encode_ns")  # blazr.backends.wgpu_runtime.Stats fields


@dataclass
class Run:
    """One measured request: times in seconds from the start, and backend counters over its decode steps."""

    ttft: float
    total: float
    token_times: list[float]
    per_step: dict[str, float] = field(default_factory=dict)


def bench(
    model: o.ModelArgument = None,
    device: o.Device = None,
    dtype: o.DType = None,
    num_ctx: o.NumCtx = None,
    kv_cache_type: o.KvCacheType = None,
    decode_tokens: Annotated[int, typer.Option("--decode-tokens", help="Tokens to generate per run")] = 128,
    prompt_tokens: Annotated[
        list[int] | None,
        typer.Option("--prompt-tokens", help="Prompt length in tokens (repeatable; default: 32, 128, 512)"),
    ] = None,
    runs: Annotated[int, typer.Option("--runs", help="Measured runs per prompt length, after 1 warmup")] = 3,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the results to this file")
    ] = None,
    model_dir: o.ModelDir = None,
) -> None:
    """Measure prefill and decode speed (tok/s), time to first token and per-step device work."""
    settings = o.settings_from_params(locals())
    lengths = list(prompt_tokens or DEFAULT_PROMPT_TOKENS)
    for flag, value in [
        ("--decode-tokens", decode_tokens),
        ("--runs", runs),
        ("--prompt-tokens", min(lengths)),
    ]:
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, not {value}")
    path = o.model_path(model, settings, model_dir)
    engine, tokenizer = load_engine(path, settings, max(lengths) + decode_tokens)
    from blazr.commands.bench_floor import copy_bandwidth, weight_bytes

    floor = {
        "weight_bytes_per_token": weight_bytes(engine.model),
        "copy_bytes_per_sec": copy_bandwidth(engine.backend),
    }
    results = []
    for length in lengths:
        prompt = bench_prompt(tokenizer, length)
        measure(engine, prompt, decode_tokens)  # warmup: compiles pipelines, fills buffer pools
        result = summarize(length, [measure(engine, prompt, decode_tokens) for _ in range(runs)])
        floor_seconds = floor["weight_bytes_per_token"] / floor["copy_bytes_per_sec"]
        result["bandwidth_floor_fraction"] = floor_seconds * result["decode_tok_per_sec"]["median"]
        results.append(result)
    report = {
        "model": str(path),
        "backend": engine.backend.name,
        "num_ctx": engine.num_ctx,
        "kv_cache_type": engine.kv_dtype,
        "decode_tokens": decode_tokens,
        "measurement_runs": runs,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bandwidth": floor,
        "results": results,
    }
    print_report(report)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def load_engine(path: Path, settings, needed_ctx: int):
    """Model, tokenizer and an engine of one sequence without a prefix cache (repeated prompts stay cold)."""
    from blazr.backends import get_backend
    from blazr.engine.engine import Engine
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.tokenizer import load_tokenizer

    checkpoint = load_checkpoint(path)
    backend = get_backend(settings.device)
    net = build_model(checkpoint, backend, settings.inference.dtype)
    num_ctx = settings.num_ctx or min(2048, net.args.max_position_embeddings)
    if needed_ctx > num_ctx:
        raise ConfigError(
            f"--num-ctx {num_ctx} is too small for the longest prompt plus --decode-tokens ({needed_ctx} tokens)"
        )
    tokenizer = load_tokenizer(checkpoint)
    engine = Engine(
        net,
        tokenizer,
        backend,
        num_ctx=num_ctx,
        max_seqs=1,
        enable_prefix_cache=False,
        kv_cache_type=settings.inference.kv_cache_type,
    )
    return engine, tokenizer


def bench_prompt(tokenizer, length: int) -> list[int]:
    """Exactly `length` token ids of the repeated bench sentence (BOS first when the tokenizer adds one)."""
    text = BENCH_TEXT
    ids = tokenizer.encode(text, add_special_tokens=True)
    while len(ids) < length and len(text) < 64 * length:
        text *= 2
        ids = tokenizer.encode(text, add_special_tokens=True)
    if len(ids) < length:
        # A vocabulary that cannot spell the text (placeholder tokens fold it into one unknown id): the
        # text stopped growing the ids, so the prompt continues with ordinary ids cycling over the vocabulary.
        vocab = max(4, int(tokenizer.vocab_size))
        ids = ids + [3 + i % (vocab - 3) for i in range(length - len(ids))]
    return ids[:length]


def counters(backend) -> dict[str, int]:
    stats = getattr(backend, "stats", None)
    return {name: getattr(stats, name) for name in COUNTERS} if stats is not None else {}


def measure(engine, prompt: list[int], decode_tokens: int) -> Run:
    """One greedy request of exactly decode_tokens tokens, timed at each token the engine returns."""
    from blazr.engine.request import SamplingParams

    params = SamplingParams(max_tokens=decode_tokens, temperature=0.0, ignore_eos=True)
    engine.add_request(uuid.uuid4().hex, prompt, params)
    start, times, at_first = time.perf_counter(), [], {}
    while engine.has_unfinished():
        for out in engine.step():
            now = time.perf_counter() - start
            times += [now] * (out.completion_tokens - len(times))
            if not at_first and times:
                at_first = counters(engine.backend)
    at_end, steps = counters(engine.backend), max(1, len(times) - 1)
    per_step = {name: (at_end[name] - at_first[name]) / steps for name in at_end}
    return Run(times[0], times[-1], times, per_step)


def _stats(values: list[float], *percentiles: int) -> dict[str, Any]:
    out: dict[str, Any] = {"median": float(np.median(values))}
    out |= {f"p{p}": float(np.percentile(values, p)) for p in percentiles}
    return out | {"samples": [round(v, 3) for v in values]}


def summarize(length: int, runs: list[Run]) -> dict[str, Any]:
    decode = [(len(r.token_times) - 1) / (r.total - r.ttft) if r.total > r.ttft else 0.0 for r in runs]
    itl = np.concatenate([np.diff(r.token_times) for r in runs]) * 1e3 if runs[0].token_times else np.zeros(1)
    result = {
        "prompt_tokens": length,
        "concurrency": 1,
        "ttft_ms": _stats([r.ttft * 1e3 for r in runs], 50, 95, 99),
        "prefill_tok_per_sec": _stats([length / r.ttft for r in runs]),
        "decode_tok_per_sec": _stats(decode),
        "total_ms": _stats([r.total * 1e3 for r in runs]),
        "itl_ms": {f"p{p}": float(np.percentile(itl, p)) if itl.size else 0.0 for p in (50, 95, 99)}
        | {"count": int(itl.size)},
    }
    if runs[0].per_step:
        result["per_decode_step"] = {k: float(np.median([r.per_step[k] for r in runs])) for k in COUNTERS}
    return result


def print_report(report: dict[str, Any]) -> None:
    print(f"model {report['model']} on {report['backend']}, num_ctx {report['num_ctx']}, ", end="")
    print(f"KV cache {report['kv_cache_type']}, ", end="")
    print(f"{report['decode_tokens']} decode tokens, 1 warmup + {report['measurement_runs']} runs (medians)")
    bw = report["bandwidth"]
    print(
        f"weights read per token {bw['weight_bytes_per_token'] / 2**20:.1f} MiB, device copy bandwidth "
        f"{bw['copy_bytes_per_sec'] / 1e9:.1f} GB/s"
    )
    for r in report["results"]:
        line = (
            f"prompt {r['prompt_tokens']:>5} tok: prefill {r['prefill_tok_per_sec']['median']:8.1f} tok/s, "
            f"TTFT {r['ttft_ms']['median']:8.1f} ms, decode {r['decode_tok_per_sec']['median']:7.2f} tok/s, "
            f"ITL p50 {r['itl_ms']['p50']:.1f} / p99 {r['itl_ms']['p99']:.1f} ms, "
            f"{100 * r['bandwidth_floor_fraction']:.0f}% of the bandwidth floor"
        )
        step = r.get("per_decode_step")
        if step:
            line += (
                f"; per decode step: {step['dispatches']:.0f} dispatches, {step['submits']:.1f} submits, "
                f"{step['bytes_read']:.0f} bytes read back, host encode {step['encode_ns'] / 1e6:.2f} ms "
                f"({100 * step['encode_ns'] / 1e9 * r['decode_tok_per_sec']['median']:.0f}% of the step)"
            )
        print(line)
