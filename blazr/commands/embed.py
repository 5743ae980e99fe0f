"""`blazr embed` (lines on stdin -> one JSON vector per line) and `blazr rerank QUERY` (documents on stdin, one
per line -> the documents by relevance, one JSON object per line), with an embedding model or reranker."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from blazr.commands import options as o
from blazr.config import resolve_model_dir
from blazr.errors import ConfigError

DEFAULT_EMBEDDER = "all-minilm"  # the catalog's embedding model: `blazr embed` needs no flag to work

EmbedModel = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help=f"Embedding model or reranker path or name (default: {DEFAULT_EMBEDDER})"
    ),
]
NoTruncate = Annotated[
    bool,
    typer.Option(
        "--no-truncate", help="Fail on an input longer than the model's limit instead of cutting it"
    ),
]


def embed(
    model: EmbedModel = None,
    text: Annotated[
        list[str] | None,
        typer.Option("--text", "-t", help="Text to embed (repeatable; default: stdin lines)"),
    ] = None,
    prompt_name: Annotated[
        str | None, typer.Option("--prompt-name", help="One of the model's prompts, e.g. query or document")
    ] = None,
    dimensions: Annotated[
        int | None, typer.Option("--dimensions", help="Keep the first N values (Matryoshka models)", min=1)
    ] = None,
    no_truncate: NoTruncate = False,
    device: o.Device = None,
    dtype: o.DType = None,
    task: o.Task = None,
    model_dir: o.ModelDir = None,
) -> None:
    """Embed each non-empty line of stdin (or each --text): one JSON line {"index", "embedding"} per input,
    in order."""
    texts = text if text else _stdin_lines("embed")
    embedder = _load(model, device, dtype, model_dir, task)
    vectors = embedder.embed(texts, prompt_name=prompt_name, dimensions=dimensions, truncate=not no_truncate)
    out = sys.stdout
    for i, row in enumerate(vectors):
        out.write(json.dumps({"index": i, "embedding": [round(float(v), 7) for v in row]}) + "\n")
    out.flush()


def rerank(
    query: Annotated[str, typer.Argument(help="The query the documents are ranked against")],
    model: EmbedModel = None,
    top_n: Annotated[
        int | None, typer.Option("--top-n", help="Print only the N best documents", min=1)
    ] = None,
    no_truncate: NoTruncate = False,
    instruction: Annotated[
        str | None,
        typer.Option(
            "--instruction", help="A decoder reranker's task description (Qwen3-Reranker's Instruct)"
        ),
    ] = None,
    device: o.Device = None,
    dtype: o.DType = None,
    task: o.Task = None,
    model_dir: o.ModelDir = None,
) -> None:
    """Rank the documents on stdin (one per line) by relevance to QUERY: a reranker's scores, or the cosine
    similarity of an embedding model's vectors. One JSON line {"index", "score", "text"} each, best first."""
    documents = _stdin_lines("rerank")
    embedder = _load(model, device, dtype, model_dir, task)
    scores = embedder.rerank(query, documents, truncate=not no_truncate, instruction=instruction)
    order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))[: top_n or len(documents)]
    for i in order:
        sys.stdout.write(
            json.dumps({"index": i, "score": round(float(scores[i]), 6), "text": documents[i]}) + "\n"
        )
    sys.stdout.flush()


def _stdin_lines(command: str) -> list[str]:
    if sys.stdin is None or sys.stdin.isatty():
        what = "--text or lines on stdin" if command == "embed" else "documents on stdin, one per line"
        raise ConfigError(f"blazr {command} needs {what}")
    lines = [line.rstrip("\r\n") for line in sys.stdin]
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ConfigError(f"blazr {command}: stdin held no non-empty line")
    return lines


def _load(
    model: str | None, device: str | None, dtype: str | None, model_dir: Path | None, task: str | None = None
):
    from blazr.model_dir import resolve_model
    from blazr.tasks.embed import Embedder

    settings = o.settings_from_flags(device=device, dtype=dtype, task=task)
    path = resolve_model(
        model or DEFAULT_EMBEDDER, pull=True, directory=resolve_model_dir(settings, model_dir)
    )
    return Embedder.load(
        path, device=settings.device, dtype=settings.inference.dtype, task=settings.inference.task
    )
