"""`blazr sound-review DIR`: checks rendered sound files against what they should be (loudness, peaks and
clipping, silence, duration: blazr/tasks/sound_checks.py) and, with a CLAP model, ranks each sound against
every description to see that its own one fits it best (blazr/tasks/sound_rank.py).

The sounds and their descriptions come from a manifest or from .txt sidecars (blazr/tasks/sound_manifest.py;
docs/cli.md). A table goes to stdout (or, with --json, one JSON report); the summary goes to stderr.
Exit codes (features.md §1.11, as for speak): 0 every sound passed; 1 a check failed or the run failed; 2 bad
input (a missing directory or file, a bad manifest, a flag out of range, an unreadable sound, no model given
without --no-model); 3 --model is not a model blazr runs as CLAP (run it another way).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.config import resolve_model_dir
from blazr.errors import BlazrError, ConfigError, ModelNotFoundError, UnsupportedError
from blazr.tasks.sound_checks import Limits, Measures, measure, problems
from blazr.tasks.sound_manifest import Sound, find_sounds

EXIT_NOT_RUN = 3  # a model blazr does not run as CLAP: the caller should run it another way
CHECKS = "Checks"
NO_MODEL = (
    "no CLAP model in blazr's catalog to rank the sounds against their descriptions; give one with --model "
    "PATH (a Hugging Face ClapModel directory: config.json + model.safetensors + tokenizer), or pass "
    "--no-model to run the checks alone"
)


def _limit(flag: str, help: str) -> Any:
    return typer.Option(flag, help=help, rich_help_panel=CHECKS)


DEFAULTS = Limits()  # the flags' defaults


@dataclass(frozen=True)
class Review:
    """One sound's verdict."""

    sound: Sound
    measures: Measures
    problems: list[str]
    ranking: dict[str, Any] | None = None  # rank, similarity, best match (with a model)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        s = self.sound
        return {
            "file": s.name,
            "description": s.description,
            "expected": {"duration": s.duration, "loudness": s.loudness},
            "measures": self.measures.to_dict(),
            "ranking": self.ranking,
            "problems": self.problems,
            "ok": self.ok,
        }


def sound_review(
    directory: Annotated[Path, typer.Argument(help="Folder of sounds (WAV, FLAC, OGG, MP3)")],
    manifest: Annotated[
        Path | None,
        typer.Option(
            "--manifest", help="YAML/JSON manifest (default: DIR/manifest.yaml, else .txt sidecars)"
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="CLAP model (a Hugging Face ClapModel directory)")
    ] = None,
    no_model: Annotated[bool, typer.Option("--no-model", help="Run the checks without ranking")] = False,
    max_rank: Annotated[
        int, typer.Option("--max-rank", help="Rank of its own description a sound needs to pass (>= 1)")
    ] = 1,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON report instead of the table")
    ] = False,
    min_loudness: Annotated[
        float, _limit("--min-loudness", "LUFS; quieter fails (no target)")
    ] = DEFAULTS.min_loudness,
    max_loudness: Annotated[
        float, _limit("--max-loudness", "LUFS; louder fails (no target)")
    ] = DEFAULTS.max_loudness,
    loudness_tolerance: Annotated[
        float, _limit("--loudness-tolerance", "LU either side of a manifest's loudness target")
    ] = DEFAULTS.loudness_tolerance,
    max_true_peak: Annotated[float, _limit("--max-true-peak", "dBTP; higher fails")] = DEFAULTS.max_true_peak,
    clip_level: Annotated[
        float, _limit("--clip-level", "dBFS a clipped sample reaches")
    ] = DEFAULTS.clip_level,
    clip_run: Annotated[
        int, _limit("--clip-run", "Neighbouring clipped samples that fail")
    ] = DEFAULTS.clip_run,
    silence_level: Annotated[
        float, _limit("--silence-level", "dBFS at or below: silent")
    ] = DEFAULTS.silence_level,
    max_lead: Annotated[
        float, _limit("--max-lead", "Seconds of leading silence allowed")
    ] = DEFAULTS.max_lead,
    max_tail: Annotated[
        float, _limit("--max-tail", "Seconds of trailing silence allowed")
    ] = DEFAULTS.max_tail,
    max_silence: Annotated[
        float, _limit("--max-silence", "Silent fraction allowed (0-1)")
    ] = DEFAULTS.max_silence,
    duration_tolerance: Annotated[
        float, _limit("--duration-tolerance", "Fraction of the expected duration a sound may be off")
    ] = DEFAULTS.duration_tolerance,
    device: o.Device = None,
    model_dir: o.ModelDir = None,
) -> None:
    """Check rendered sounds (loudness, clipping, silence, duration) and rank them against their descriptions."""
    params = locals()
    limits = check_limits(Limits(**{f.name: params[f.name] for f in fields(Limits)}))
    if model is not None and no_model:
        raise ConfigError("--model and --no-model: give one (--no-model skips the ranking)")
    if max_rank < 1:
        raise ConfigError(f"--max-rank {max_rank}: it must be 1 or more")
    sounds = find_sounds(directory, manifest)
    ranker = None
    if model is not None:
        _check_descriptions(sounds)
        ranker = load_ranker(model, o.settings_from_flags(device=device), model_dir)
    reviews = review(sounds, limits, ranker, max_rank)
    print_report(reviews, limits, directory, model, as_json)
    failed = [r.sound.name for r in reviews if not r.ok]
    verdict = f"{len(failed)} FAILED ({', '.join(failed)})" if failed else "all passed"
    typer.echo(f"{len(reviews)} sounds: {verdict}", err=True)
    if model is None and not no_model:
        raise ConfigError(NO_MODEL)
    if failed:
        raise typer.Exit(1)


def check_limits(limits: Limits) -> Limits:
    """Every threshold in range, naming the flag (exit 2)."""
    checks = (
        ("--min-loudness", limits.min_loudness, -70.0, 0.0),
        ("--max-loudness", limits.max_loudness, -70.0, 0.0),
        ("--loudness-tolerance", limits.loudness_tolerance, 0.0, 70.0),
        ("--max-true-peak", limits.max_true_peak, -70.0, 20.0),
        ("--clip-level", limits.clip_level, -20.0, 0.0),
        ("--clip-run", limits.clip_run, 1, 10_000),
        ("--silence-level", limits.silence_level, -150.0, -10.0),
        ("--max-lead", limits.max_lead, 0.0, 3600.0),
        ("--max-tail", limits.max_tail, 0.0, 3600.0),
        ("--max-silence", limits.max_silence, 0.0, 1.0),
        ("--duration-tolerance", limits.duration_tolerance, 0.0, 10.0),
    )
    for flag, value, low, high in checks:
        if not low <= value <= high:
            raise ConfigError(f"{flag} {value:g}: it must be in [{low:g}, {high:g}]")
    if limits.min_loudness > limits.max_loudness:
        raise ConfigError(
            f"--min-loudness {limits.min_loudness:g} is above --max-loudness {limits.max_loudness:g}"
        )
    return limits


def _check_descriptions(sounds: list[Sound]) -> None:
    """Ranking compares every sound with every description: each needs one (exit 2, naming the sound)."""
    for s in sounds:
        if s.description is None:
            raise ConfigError(
                f"{s.path}: no description to rank it against (add {s.path.with_suffix('.txt').name} or a "
                "manifest entry), or pass --no-model"
            )


def load_ranker(model: str, settings: Any, model_dir: Path | None) -> Any:
    """The ClapRanker for --model: a missing model exits 2; one that is not CLAP exits 3."""
    from blazr.model_dir import resolve_model
    from blazr.tasks.sound_rank import ClapRanker, is_clap

    try:
        path = resolve_model(model, pull=True, directory=resolve_model_dir(settings, model_dir))
    except ModelNotFoundError as e:
        raise ConfigError(f"--model: {e}") from None
    if not is_clap(path):
        raise _not_run(f"--model {model}: not a CLAP model (a Hugging Face ClapModel directory)")
    try:
        return ClapRanker.load(path, device=settings.device)
    except UnsupportedError as e:
        raise _not_run(f"--model {model}: {e}") from None


def _not_run(message: str) -> typer.Exit:
    typer.echo(f"error: {message}; run it another way", err=True)
    return typer.Exit(EXIT_NOT_RUN)


def review(sounds: list[Sound], limits: Limits, ranker: Any, max_rank: int) -> list[Review]:
    """Measure and judge every sound; with a ranker, rank each against every description."""
    from blazr.audio.decode import load_audio_channels

    reviews = []
    for s in sounds:
        samples, rate = load_audio_channels(s.path)  # (N, C); an unreadable sound is bad input (exit 2)
        m = measure(samples, rate, limits)
        reviews.append(Review(s, m, problems(m, limits, s.duration, s.loudness)))
    if ranker is None:
        return reviews
    try:
        ranks = ranker.rank([s.path for s in sounds], [s.description for s in sounds])
    except BlazrError:
        raise
    except Exception as e:  # a fault of ours: one line, exit 1, never a traceback
        typer.echo(f"error: ranking failed ({type(e).__name__}: {e})", err=True)
        raise typer.Exit(1) from None
    out = []
    for r, ranking in zip(reviews, ranks, strict=True):
        found = list(r.problems)
        if ranking["rank"] > max_rank:
            found.append(
                f"its description ranks {ranking['rank']} of {len(sounds)} (best: {ranking['best_match']})"
            )
        out.append(Review(r.sound, r.measures, found, ranking))
    return out


def print_report(reviews: list[Review], limits: Limits, directory: Path, model: str | None, as_json: bool):
    if as_json:
        report = {
            "directory": str(directory),
            "model": model,
            "limits": asdict(limits),
            "ok": all(r.ok for r in reviews),
            "sounds": [r.to_dict() for r in reviews],
        }
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(table(reviews))


def table(reviews: list[Review]) -> str:
    """One line per sound: file, verdict, measures, rank (with a model) and problems."""
    ranked = any(r.ranking is not None for r in reviews)
    head = ["file", "status", "seconds", "LUFS", "dBTP", "lead", "tail", "silent"] + (
        ["rank"] if ranked else []
    )
    rows = [[*_cells(r), *([str(r.ranking["rank"])] if ranked else [])] for r in reviews]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + "  problems"]
    for r, row in zip(reviews, rows, strict=True):
        cells = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append(f"{cells}  {'; '.join(r.problems) or '-'}")
    return "\n".join(lines)


def _cells(r: Review) -> list[str]:
    m = r.measures
    return [
        r.sound.name,
        "ok" if r.ok else "FAILED",
        f"{m.duration:.2f}",
        _db(m.loudness),
        _db(m.true_peak),
        f"{m.lead_silence:.2f}",
        f"{m.tail_silence:.2f}",
        f"{m.silent_fraction:.0%}",
    ]


def _db(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "-inf" if value == float("-inf") else f"{value:.1f}"
