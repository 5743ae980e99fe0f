"""Progress bars on stderr (rich.progress, which typer already brings) for model loading, pulls and long
transcriptions. They show only on a terminal, never with `blazr --quiet`, so pipes and logs get the output alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_state = {"quiet": False}


def set_quiet(quiet: bool) -> None:
    """`blazr --quiet`: no progress bars (and no pip / Hub download bars) for this run."""
    _state["quiet"] = quiet
    if quiet:
        try:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        except ImportError:
            pass


def quiet() -> bool:
    return _state["quiet"]


def bars_enabled() -> bool:
    return not _state["quiet"] and sys.stderr.isatty()


@contextmanager
def progress_bar(
    description: str, total: float | None, unit: str = "", force: bool | None = None
) -> Iterator[Callable[[float, float | None], None]]:
    """Yields update(done, total=None): the bar's position (and its total, when it becomes known). A no-op
    off a terminal or with --quiet; `force` True / False overrides that (a command's own --progress flag)."""
    show = bars_enabled() if force is None else (force and not _state["quiet"])
    if not show:
        yield lambda done, total=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn()]
    columns += [TextColumn("{task.completed:.1f}/{task.total:.1f} " + unit)] if unit else []
    columns += [TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)

        def update(done: float, new_total: float | None = None) -> None:
            if new_total is not None:
                bar.update(task, total=new_total)
            bar.update(task, completed=done)

        yield update
