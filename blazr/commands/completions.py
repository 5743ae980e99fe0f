"""`blazr completions SHELL`: print a shell completion script (typer's --install-completion and
--show-completion do the same for the current shell)."""

from __future__ import annotations

from typing import Annotated

import typer

from blazr.errors import ConfigError

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def completions(shell: Annotated[str, typer.Argument(help=f"One of: {', '.join(SHELLS)}")]) -> None:
    """Print the completion script for SHELL; e.g. `blazr completions bash >> ~/.bashrc`."""
    from typer._completion_shared import get_completion_script  # the script typer's --show-completion prints

    name = shell.strip().lower()
    if name not in SHELLS:
        raise ConfigError(f"SHELL: {shell!r} is not supported; use one of {', '.join(SHELLS)}")
    print(get_completion_script(prog_name="blazr", complete_var="_BLAZR_COMPLETE", shell=name))
