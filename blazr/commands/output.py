"""Terminal output: generated text streams to stdout piece by piece; stats and notes go to stderr so a pipe
receives the text alone."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any


def stream_text(pieces: Iterable[str], parts: list[str] | None = None) -> str:
    """Write each piece to stdout as it arrives and append it to `parts` (kept if the stream is interrupted);
    return the whole text."""
    parts = [] if parts is None else parts
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
        parts.append(piece)
    return "".join(parts)


def end_line(text: str) -> None:
    """Finish the line on a terminal; a pipe gets exactly the generated text."""
    if sys.stdout.isatty() and not text.endswith("\n"):
        sys.stdout.write("\n")
        sys.stdout.flush()


def format_stats(stats: Any) -> str:
    """`[N tokens, X tok/s, Ys]` from LLM.last_stats; tok/s counts decode steps only (the first token comes
    out of the prefill)."""
    total = stats.prefill_seconds + stats.decode_seconds
    return f"[{stats.completion_tokens} tokens, {stats.decode_tokens_per_second:.1f} tok/s, {total:.2f}s]"


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
