"""`blazr convert INPUT -o OUT --format gguf|safetensors -q TYPE` (blazr.convert)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blazr.commands.output import note
from blazr.commands.progress import progress_bar


def convert(
    source: Annotated[Path, typer.Argument(help="A SafeTensors model directory, or a .gguf file")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The file (GGUF) or directory (SafeTensors)")
    ],
    fmt: Annotated[str, typer.Option("--format", help="gguf or safetensors")] = "gguf",
    quantize: Annotated[
        str | None,
        typer.Option(
            "--quantize",
            "-q",
            help="Output type: GGUF f32, f16 (default), bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q4_k_s, "
            "q5_k_m, q5_k_s, q6_k; SafeTensors f32 (default), f16, bf16",
        ),
    ] = None,
) -> None:
    """Convert a model between Hugging Face SafeTensors and GGUF (quantizing on the way to GGUF)."""
    from blazr.convert import convert as run

    with progress_bar(f"converting {source.name}", None) as update:
        path = run(source, output, fmt.lower(), quantize.lower() if quantize else None, update)
    note(f"wrote {path}")
