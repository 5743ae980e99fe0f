"""The `blazr` command line. Commands live in blazr/commands/; this file builds the app, prints --version and
turns every BlazrError into `error: <message>` on stderr with the error's exit code (never a traceback)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from blazr import __version__
from blazr.commands import (
    bench,
    completions,
    convert,
    devices,
    disagg,
    embed,
    generate,
    models,
    repl,
    serve,
    sound_review,
    speak,
    swarm,
    transcribe,
)
from blazr.errors import BlazrError

# optional module -> the feature it gives (pyproject [project.optional-dependencies]). Only features with code
# behind them are here: a CUDA backend is not built yet, so having cupy installed adds nothing to --version;
# speech recognition needs no extra (soundfile and soxr are core dependencies).
OPTIONAL_FEATURES = (("wgpu", "wgpu"), ("quart", "server"), ("ray", "distributed"), ("misaki", "kokoro"))


class BlazrGroup(TyperGroup):
    """Runs a command and reports a user error as one line on stderr."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BlazrError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None


app = typer.Typer(
    cls=BlazrGroup,
    name="blazr",
    help="Run language models on CPU or GPU: generate, chat, inspect and download models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def enabled_features() -> list[str]:
    """The optional features that work here: the module installed and, for wgpu, an adapter found."""
    found = [extra for module, extra in OPTIONAL_FEATURES if importlib.util.find_spec(module) is not None]
    if "wgpu" in found and not _wgpu_adapter_found():
        found.remove("wgpu")
    return found


def _wgpu_adapter_found() -> bool:
    """Whether the WGSL backend can run here: its library loads and finds at least one adapter."""
    try:
        from blazr.backends.wgpu_device import list_adapters

        return bool(list_adapters())
    except (BlazrError, ImportError, OSError, RuntimeError):
        return False


def version_text() -> str:
    features = enabled_features()
    return f"blazr {__version__}" + (f" ({', '.join(features)})" if features else "")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit"),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No progress bars (they show only on a terminal anyway)"),
    ] = False,
) -> None:
    """Run language models on CPU or GPU: generate, chat, inspect and download models."""
    from blazr.commands.progress import set_quiet

    set_quiet(quiet)


app.command("generate")(generate.generate)
app.command("run")(generate.run)
app.command("chat")(repl.chat)
app.command("info")(models.info)
app.command("list")(models.list_command)
app.command("pull")(models.pull)
app.command("rm")(models.rm)
app.command("cp")(models.cp)
app.command("create")(models.create)
app.command("convert")(convert.convert)
app.command("completions")(completions.completions)
app.command("devices")(devices.devices)
app.command("serve")(serve.serve)
app.command("ps")(serve.ps)
app.command("bench")(bench.bench)
app.command("embed")(embed.embed)
app.command("rerank")(embed.rerank)
app.command("transcribe")(transcribe.transcribe)
app.command("speak")(speak.speak)
app.command("sound-review")(sound_review.sound_review)
app.command("swarm")(swarm.swarm)
app.command("disagg")(disagg.disagg)


def main() -> None:
    """Console-script entry point (`blazr`)."""
    app(prog_name="blazr")


if __name__ == "__main__":
    sys.exit(main())
