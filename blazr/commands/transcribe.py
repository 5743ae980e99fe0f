"""`blazr transcribe FILE...`: speech to text with a Whisper model, as text, subtitles (srt, vtt), OpenAI's json
or a words file (one JSON object per word with start, end and probability; see
blazr/tasks/transcript_formats.py).

Made for media pipelines: the result goes to stdout, or with --output-dir to one file per input named after
it (talk.wav -> talk.srt, talk.words.jsonl), written whole or not at all. Exit codes (features.md §1.11):
0 every file done; 1 a file failed; 2 bad input (a missing or unreadable audio file, a bad flag, a language
the model lacks); 3 the model is not one blazr runs (not Whisper). A bad file does not stop the others: the
run goes on and exits non-zero at the end.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.commands.progress import progress_bar, quiet
from blazr.config import resolve_model_dir
from blazr.errors import BlazrError, ConfigError, ModelNotFoundError, UnsupportedError
from blazr.loaders.registry import DEFAULT_ASR_MODEL
from blazr.model_dir import resolve_model
from blazr.tasks.transcript_formats import FORMATS, SUFFIXES, language_code, render

CLI_FORMATS = tuple(f for f in FORMATS if f != "text")  # "text" is the route's name for txt
EXIT_NOT_RUN = 3  # a model blazr does not run: the caller should run it another way
SUBTITLES = ("srt", "vtt")


def transcribe(
    files: Annotated[
        list[Path], typer.Argument(help="Audio files (wav, flac, ogg, mp3; others with ffmpeg)")
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help=f"Whisper model name or path: HF, CTranslate2 or ggml (default: {DEFAULT_ASR_MODEL})",
        ),
    ] = None,
    language: Annotated[
        str | None,
        typer.Option(
            "--language", "-l", help="Spoken language, code or name (default: detected; en for .en)"
        ),
    ] = None,
    task: Annotated[
        str, typer.Option("--task", help="transcribe, or translate (to English; multilingual models)")
    ] = "transcribe",
    fmt: Annotated[
        str, typer.Option("--format", "-f", help=f"Output format: {', '.join(CLI_FORMATS)}")
    ] = "txt",
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", "-o", help="Write one file per input here (default: stdout)"),
    ] = None,
    word_timestamps: Annotated[
        bool,
        typer.Option(
            "--word-timestamps", help="Time each word (verbose_json words; implied by --format words)"
        ),
    ] = False,
    temperature: Annotated[
        str | None,
        typer.Option(
            "--temperature",
            help="0 = greedy; a comma list (0,0.2,0.4) falls back on bad windows (default: the model's)",
        ),
    ] = None,
    initial_prompt: Annotated[
        str | None,
        typer.Option("--initial-prompt", help="Text that conditions the first window (names, spelling)"),
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress", help="Progress on stderr (default: when stderr is a terminal)"
        ),
    ] = None,
    device: o.Device = None,
    model_dir: o.ModelDir = None,
) -> None:
    """Transcribe (or translate to English) each audio FILE with a Whisper model."""
    temperatures = _check_flags(files, fmt, task, language, temperature, output_dir)
    transcriber = load_transcriber(model, device, model_dir)
    code = language_code(language) if language else None
    _check_model_fits(transcriber, code, language, task)
    show_progress = (sys.stderr.isatty() if progress is None else progress) and not quiet()
    failures: list[int] = []
    for path in files:
        try:
            transcript = run_one(
                transcriber,
                path,
                language=code,
                task=task,
                initial_prompt=initial_prompt,
                temperature=temperatures,
                word_timestamps=word_timestamps or fmt == "words",
                show_progress=show_progress,
            )
            text = render(transcript, fmt, task=task, words=word_timestamps, segments=True)
            _emit(text, path, fmt, output_dir)
        except BlazrError as e:
            message = str(e) if str(path) in str(e) else f"{path}: {e}"  # the decoder names the file itself
            typer.echo(f"error: {message}", err=True)
            failures.append(e.exit_code)
        except Exception as e:  # a fault on one file must not lose the others' results; reported, exit 1
            typer.echo(f"error: {path}: transcription failed ({type(e).__name__}: {e})", err=True)
            failures.append(1)
    if failures:
        # a failure of ours (1) outranks bad input (2): the caller must not blame its files for our fault
        raise typer.Exit(1 if 1 in failures else max(failures))


def _check_flags(
    files: list[Path],
    fmt: str,
    task: str,
    language: str | None,
    temperature: str | None,
    output_dir: Path | None,
) -> float | tuple[float, ...] | None:
    """Every flag checked before the model loads, so a typo costs no load time (exit 2); returns the
    parsed --temperature."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: use one of {', '.join(CLI_FORMATS)}")
    if task not in ("transcribe", "translate"):
        raise ConfigError(f"--task {task!r}: use transcribe or translate")
    if language is not None and language_code(language) is None:
        raise ConfigError(
            f"--language {language!r}: not a language Whisper knows (use a code such as en or de)"
        )
    if fmt in SUBTITLES and len(files) > 1 and output_dir is None:
        raise ConfigError(
            f"several files as {fmt} need --output-dir: subtitles on one stdout would run together"
        )
    if output_dir is not None:
        names = [Path(f).stem for f in files]
        twins = sorted({n for n in names if names.count(n) > 1})
        if twins:
            raise ConfigError(
                f"--output-dir: several inputs are named {twins[0]!r}; their {fmt} files would overwrite each other"
            )
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--output-dir {output_dir}: cannot create it ({e.strerror})") from None
    return parse_temperature(temperature)


def parse_temperature(value: str | None) -> float | tuple[float, ...] | None:
    """ "0" -> 0.0; "0,0.2,0.4" -> (0.0, 0.2, 0.4), each in [0, 1]; None: the transcriber's default."""
    if value is None:
        return None
    try:
        temps = tuple(float(part) for part in value.split(","))
    except ValueError:
        raise ConfigError(f"--temperature {value!r}: a number, or numbers separated by commas") from None
    if not all(0.0 <= t <= 1.0 for t in temps):
        raise ConfigError(f"--temperature {value!r}: each value must be in [0, 1]")
    return temps[0] if len(temps) == 1 else temps


def load_transcriber(model: str | None, device: str | None, model_dir: Path | None) -> Any:
    """The Whisper model the flags name (the catalog's default pulled on first use). A model blazr does not
    run as Whisper exits 3 (the caller runs it another way); a missing one exits 2 (a missing file)."""
    from blazr.tasks.transcribe import Transcriber

    settings = o.settings_from_flags(device=device)
    directory = resolve_model_dir(settings, model_dir)
    try:
        path = resolve_model(model or DEFAULT_ASR_MODEL, pull=True, directory=directory)
    except ModelNotFoundError as e:
        raise ConfigError(str(e)) from None
    try:
        return Transcriber.load(path, device=settings.device)
    except UnsupportedError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_NOT_RUN) from None


def _check_model_fits(transcriber: Any, code: str | None, language: str | None, task: str) -> None:
    """A language the model lacks, or translating with an English-only model: exit 2 before any decoding."""
    if code is not None and code not in transcriber.languages:
        known = ", ".join(transcriber.languages[:12]) + (" ..." if len(transcriber.languages) > 12 else "")
        raise ConfigError(f"--language {language}: this model does not know it (it knows {known})")
    if task == "translate" and not transcriber.multilingual:
        raise ConfigError(
            "--task translate needs a multilingual Whisper model; this one is English-only (.en)"
        )


def run_one(transcriber: Any, path: Path, *, show_progress: bool, **options: Any) -> Any:
    """One file's Transcript; the audio decoded and resampled to 16 kHz mono first."""
    from blazr.audio import load_audio

    audio = load_audio(path)
    kwargs = {k: v for k, v in options.items() if v is not None}
    if show_progress and sys.stderr.isatty():  # a bar on a terminal
        with progress_bar(path.name, None, unit="s") as update:
            return transcriber.transcribe(audio, progress=lambda done, total: update(done, total), **kwargs)
    if show_progress:  # --progress into a log: a line per tenth
        kwargs["progress"] = ProgressLine(path.name)
    try:
        return transcriber.transcribe(audio, **kwargs)
    finally:
        if show_progress:
            kwargs["progress"].close()


class ProgressLine:
    """`talk.wav: 42% (12.0 / 30.0 s)` on stderr for --progress off a terminal (a terminal gets a bar): one
    line per step of 10%, so a log file gets a handful of lines, not one per window."""

    def __init__(self, name: str):
        self.name = name
        self.tty = sys.stderr.isatty()
        self.last_tenth = -1
        self.shown = False

    def __call__(self, done: float, total: float) -> None:
        share = min(1.0, done / total) if total > 0 else 1.0
        line = f"{self.name}: {share:4.0%} ({done:.1f} / {total:.1f} s)"
        if self.tty:
            sys.stderr.write("\r" + line)
        elif int(share * 10) > self.last_tenth:
            self.last_tenth = int(share * 10)
            sys.stderr.write(line + "\n")
        else:
            return
        self.shown = True
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _emit(text: str, source: Path, fmt: str, output_dir: Path | None) -> None:
    """To stdout, or to <output_dir>/<stem><suffix>."""
    if output_dir is None:
        if fmt in ("json", "verbose_json"):
            text += "\n"  # json.dumps writes one line: several files give JSON Lines
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomically(output_dir / (source.stem + SUFFIXES[fmt]), text)


def write_atomically(target: Path, text: str) -> None:
    """Write to a temporary file beside `target`, then rename it: a pipeline watching the directory never
    reads half a file, and a failed run leaves no stub."""
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
