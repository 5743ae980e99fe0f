"""`blazr speak SCRIPT -o OUT.wav`: a script becomes one voiceover WAV and a JSON timing sidecar (OUT.json),
every part heard back by Whisper and compared word by word (blazr/tasks/voiceover.py).

The script is plain text (one part per line) or a YAML/JSON manifest with per-part voice, speed, pause and
seed (blazr/tasks/voiceover_script.py; docs/cli.md). A per-part report and a summary go to stderr; stdout gets
only the WAV's path. The WAV and sidecar are written even when a part mismatches, so it can be inspected.
Exit codes (features.md §1.11): 0 every part heard as written (or within --max-wer: marked "ok ?"); 1 a
mismatch remains or the run failed; 2 bad input (a missing script, a flag out of range, a bad manifest,
an unknown voice); 3 --model is not a voice blazr runs (run it another way).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.config import resolve_model_dir
from blazr.errors import BlazrError, ConfigError, InputError, ModelNotFoundError, UnsupportedError
from blazr.loaders.registry import DEFAULT_ASR_MODEL, DEFAULT_TTS_MODEL
from blazr.tasks.speak import MAX_SPEED, MIN_SPEED
from blazr.tasks.voiceover_script import MAX_PAUSE, MAX_SEED, Defaults, Part, read_script

EXIT_NOT_RUN = 3  # a model blazr does not run as a voice: the caller should run it another way
MAX_REROLL = 20


def speak(
    script: Annotated[
        Path, typer.Argument(help="Script: text (one part per line) or a .yaml/.json manifest (docs/cli.md)")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Voiceover WAV; the timing sidecar is OUT.json (default: SCRIPT.wav)"
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help=f"Voice: a Piper, Hugging Face VITS or Kokoro model, name or path (default: {DEFAULT_TTS_MODEL})",
        ),
    ] = None,
    voice: Annotated[
        str | None, typer.Option("--voice", help="Speaker of the model (default: its first)")
    ] = None,
    speed: Annotated[
        float, typer.Option("--speed", help=f"Speaking rate, {MIN_SPEED:g} to {MAX_SPEED:g}")
    ] = 1.0,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of each part's first take; a re-roll k uses seed + k")
    ] = 0,
    reroll: Annotated[
        int,
        typer.Option(
            "--reroll",
            help=f"Re-synthesize a mismatched part up to N more times (0-{MAX_REROLL}); keep the best",
        ),
    ] = 0,
    pause: Annotated[
        float, typer.Option("--pause", help="Seconds of silence between parts (default: 0.3)")
    ] = 0.3,
    max_wer: Annotated[
        float,
        typer.Option("--max-wer", help='Word error rate a part may have and pass, marked "ok ?" (0-1)'),
    ] = 0.0,
    check: Annotated[
        bool, typer.Option("--check/--no-check", help="Hear every part back with Whisper (default: on)")
    ] = True,
    asr_model: Annotated[
        str | None,
        typer.Option("--asr-model", help=f"Whisper model that listens (default: {DEFAULT_ASR_MODEL})"),
    ] = None,
    device: o.Device = None,
    model_dir: o.ModelDir = None,
    voice_dir: o.VoiceDir = None,
) -> None:
    """Speak SCRIPT into one voiceover WAV with a timing sidecar; Whisper checks every part."""
    _check_flags(speed, seed, reroll, pause, max_wer)
    parts = read_script(script, Defaults(voice=voice, speed=speed, pause=pause, seed=seed))
    output, sidecar = output_paths(script, output)
    settings = o.settings_from_flags(device=device, voice_dir=voice_dir)
    directory = resolve_model_dir(settings, model_dir)
    synthesizer = load_voice(model or DEFAULT_TTS_MODEL, settings.device, directory, settings.voice_dir)
    _check_parts(synthesizer, parts, script, voice)
    listener = load_listener(asr_model or DEFAULT_ASR_MODEL, settings.device, directory) if check else None
    if listener is not None:
        _check_hearing(listener, synthesizer, parts, asr_model or DEFAULT_ASR_MODEL)
    try:
        from blazr.tasks.voiceover import make_voiceover, write_json, write_wav

        result = make_voiceover(synthesizer, parts, listener, reroll, max_wer, on_part=report_part)
        write_wav(output, result.audio, result.sample_rate)
        write_json(
            sidecar,
            result.timing(
                output.name,
                model=model or DEFAULT_TTS_MODEL,
                asr_model=(asr_model or DEFAULT_ASR_MODEL) if check else None,
                max_wer=max_wer,
            ),
        )
    except BlazrError:
        raise
    except Exception as e:  # a fault of ours: one line, exit 1, never a traceback
        typer.echo(f"error: {script}: speech failed ({type(e).__name__}: {e})", err=True)
        raise typer.Exit(1) from None
    failed = report_summary(result, output, sidecar, reroll)
    typer.echo(str(output))
    if failed:
        raise typer.Exit(1)


def _check_flags(speed: float, seed: int, reroll: int, pause: float, max_wer: float) -> None:
    """Every flag checked before a model loads, naming the flag (exit 2)."""
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise ConfigError(f"--speed {speed:g}: it must be in [{MIN_SPEED:g}, {MAX_SPEED:g}]")
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed {seed}: it must be in [0, {MAX_SEED}]")
    if not 0 <= reroll <= MAX_REROLL:
        raise ConfigError(f"--reroll {reroll}: it must be in [0, {MAX_REROLL}]")
    if not 0.0 <= pause <= MAX_PAUSE:
        raise ConfigError(f"--pause {pause:g}: it must be in [0, {MAX_PAUSE:g}] seconds")
    if not 0.0 <= max_wer <= 1.0:
        raise ConfigError(f"--max-wer {max_wer:g}: it must be in [0, 1]")


def output_paths(script: Path, output: Path | None) -> tuple[Path, Path]:
    """(the WAV, its sidecar): --output or SCRIPT with .wav, and that with .json. Neither may be the script,
    and the folder must exist."""
    wav = output if output is not None else script.with_suffix(".wav")
    sidecar = wav.with_suffix(".json")
    flag = "--output" if output is not None else "the default output (SCRIPT.wav)"
    if wav.suffix.lower() != ".wav":
        raise ConfigError(f"--output {wav}: the voiceover is a WAV file; name it with .wav")
    for path, what in ((wav, "voiceover"), (sidecar, "timing sidecar")):
        if script.exists() and path.exists() and path.resolve() == script.resolve():
            raise ConfigError(
                f"{script}: the {what} {path.name} would overwrite the script; give --output another name"
            )
    if not wav.parent.is_dir():
        raise ConfigError(f"{flag} {wav}: its folder {wav.parent} does not exist")
    if wav.is_dir():
        raise ConfigError(f"{flag} {wav}: is a directory")
    return wav, sidecar


def load_voice(model: str, device: str, directory: Path, voice_dir: str | None = None) -> Any:
    """The Synthesizer for --model. A missing model exits 2; one that is not a voice (Piper, Hugging Face
    VITS or Kokoro) exits 3."""
    from blazr.model_dir import resolve_model
    from blazr.tasks.speak import Synthesizer, is_voice

    try:
        path = resolve_model(model, pull=True, directory=directory)
    except ModelNotFoundError as e:
        raise ConfigError(f"--model: {e}") from None
    if not is_voice(path):
        raise _not_run(
            f"--model {model}: not a voice blazr runs (it reads Piper voices, an .onnx with its .onnx.json, "
            "Hugging Face VITS directories and Kokoro models)"
        )
    try:
        return Synthesizer.load(path, device=device, voice_dir=voice_dir)
    except UnsupportedError as e:
        raise _not_run(f"--model {model}: {e}") from None


def _not_run(message: str) -> typer.Exit:
    typer.echo(f"error: {message}; run it another way", err=True)
    return typer.Exit(EXIT_NOT_RUN)


def load_listener(asr_model: str, device: str, directory: Path) -> Any:
    """A Listener over the Whisper model --asr-model names; a missing or non-Whisper one exits 2."""
    from blazr.model_dir import resolve_model
    from blazr.tasks.transcribe import Transcriber
    from blazr.tasks.voiceover import Listener

    try:
        path = resolve_model(asr_model, pull=True, directory=directory)
        return Listener(Transcriber.load(path, device=device))
    except (ModelNotFoundError, UnsupportedError) as e:
        raise ConfigError(f"--asr-model {asr_model}: {e}") from None


def _check_parts(synthesizer: Any, parts: list[Part], script: Path, voice_flag: str | None) -> None:
    """Each part's voice exists and its text has something to speak, before any synthesis (exit 2)."""
    if voice_flag is not None:
        try:
            synthesizer.voice(voice_flag)
        except InputError as e:
            raise ConfigError(f"--voice: {e}") from None
    for i, part in enumerate(parts, 1):
        where = f"{script}: " + (f"line {part.line}" if part.line is not None else f"part {i}")
        try:
            synthesizer.voice(part.voice)
        except InputError as e:
            raise ConfigError(f"{where}: {e}") from None
        try:
            if not synthesizer.phonemize(part.text, part.voice):
                raise ConfigError(f"{where}: nothing to speak in {part.text!r}")
        except UnsupportedError as e:  # a Kokoro language whose reader is not installed
            raise _not_run(f"{where}: {e}") from None


def _check_hearing(listener: Any, synthesizer: Any, parts: list[Part], asr_model: str) -> None:
    """The listener can hear every part's language (exit 2 before any synthesis): an English-only Whisper
    (tiny.en) hearing a Japanese voice would report every part as a mismatch."""
    transcriber = listener.transcriber
    for part in parts:
        voice = synthesizer.voice(part.voice)
        code = voice.language.replace("_", "-").split("-")[0].lower()
        hears = transcriber.languages if transcriber.multilingual else ("en",)
        if len(code) == 2 and code not in hears:  # ISO 639-1 as Whisper names them (MMS voices say "eng")
            which = "English only" if not transcriber.multilingual else f"no {code!r}"
            raise ConfigError(
                f"--asr-model {asr_model}: it hears {which}, and voice {voice.id} speaks {voice.language}; "
                "give a multilingual Whisper model, or --no-check"
            )


def report_part(spoken: Any, total: int) -> None:
    """One part's line on stderr (and, when it differs, what was heard and the words that differ)."""
    width = len(str(total))
    status = spoken.status.upper() if spoken.status == "mismatch" else spoken.status
    takes = f" ({spoken.takes} takes, kept seed {spoken.take.seed})" if spoken.takes > 1 else ""
    where = f" line {spoken.part.line}" if spoken.part.line is not None else ""
    head = f"part {spoken.index:>{width}}/{total}{where}  {status:<8} {spoken.start:.2f}-{spoken.end:.2f} s"
    lines = [f"{head}  {spoken.part.text}{takes}"]
    check = spoken.take.check
    if check is not None and not check.exact:
        pad = " " * 4
        lines.append(f"{pad}heard: {spoken.take.heard!r}")
        lines.extend(f"{pad}differs: {d}" for d in check.differences)
    typer.echo("\n".join(lines), err=True)
    sys.stderr.flush()


def report_summary(result: Any, output: Path, sidecar: Path, reroll: int) -> bool:
    """The summary on stderr; True when a mismatch remains."""
    by_status: dict[str, list[int]] = {}
    for p in result.parts:
        by_status.setdefault(p.status, []).append(p.index)
    counts = []
    for status in ("ok", "ok ?", "mismatch", "unchecked"):
        numbers = by_status.get(status, [])
        if numbers and status in ("ok", "unchecked"):
            counts.append(f"{len(numbers)} {status}")
        elif numbers:
            listed = ", ".join(str(n) for n in numbers)
            counts.append(f"{len(numbers)} {status} (part{'s' if len(numbers) > 1 else ''} {listed})")
    typer.echo(
        f"{len(result.parts)} parts, {result.duration:.2f} s: {', '.join(counts)}; wrote {output} and {sidecar}",
        err=True,
    )
    failed = "mismatch" in by_status
    if failed and reroll == 0:
        typer.echo("hint: --reroll N tries other takes of a mismatched part", err=True)
    return failed
