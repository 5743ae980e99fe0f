"""The `blazr` command line. Commands live in blazr/commands/; this file builds the app, prints --version and
turns every BlazrError into `error: <message>` on stderr with the error's exit code (never a traceback)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from blazr import __version__
from blazr.commands import bench, completions, devices, generate, models, repl, serve
from blazr.errors import BlazrError

# optional module -> the extra that provides it (pyproject [project.optional-dependencies])
OPTIONAL_FEATURES = (("wgpu", "wgpu"), ("cupy", "cuda"), ("quart", "server"), ("soundfile", "audio"))


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
    """The optional extras whose module is installed (found without importing it: cupy takes seconds)."""
    return [extra for module, extra in OPTIONAL_FEATURES if importlib.util.find_spec(module) is not None]


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
) -> None:
    """Run language models on CPU or GPU: generate, chat, inspect and download models."""


app.command("generate")(generate.generate)
app.command("run")(generate.run)
app.command("chat")(repl.chat)
app.command("info")(models.info)
app.command("list")(models.list_command)
app.command("pull")(models.pull)
app.command("completions")(completions.completions)
app.command("devices")(devices.devices)
app.command("serve")(serve.serve)
app.command("ps")(serve.ps)
app.command("bench")(bench.bench)


def main() -> None:
    """Console-script entry point (`blazr`)."""
    app(prog_name="blazr")


if __name__ == "__main__":
    sys.exit(main())
