"""`blazr devices`: the devices blazr can run on, with the index that `--device wgpu:N` takes."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from blazr.errors import BlazrError


def devices(
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON")] = False,
) -> None:
    """List the devices: cpu, then every WebGPU adapter (name, backend, memory limits, features)."""
    found: list[dict] = [{"device": "cpu", "name": "numpy on the host CPU", "backend": "numpy"}]
    problem = None
    try:
        from blazr.backends.wgpu_device import NO_ADAPTER, describe, list_adapters

        adapters = list_adapters()
        if not adapters:
            problem = NO_ADAPTER
        found += [{"device": f"wgpu:{i}", **describe(a)} for i, a in enumerate(adapters)]
    except BlazrError as e:  # no wgpu package, or no backend library: cpu still works
        problem = str(e)
    if as_json:
        typer.echo(json.dumps({"devices": found, "wgpu_problem": problem}, indent=2))
        return
    for entry in found:
        typer.echo(_describe_line(entry))
    if problem:
        typer.echo(f"note: {problem}", err=True)


def _describe_line(entry: dict) -> str:
    line = f"{entry['device']:<8} {entry['name']} ({entry['backend']}"
    line += f", {entry['type']})" if "type" in entry else ")"
    if "limits" in entry:
        limits = entry["limits"]
        mib = {k: v // 2**20 for k, v in limits.items() if k.endswith("-size") and v >= 2**20}
        line += "\n         " + ", ".join(f"{k} {v} MiB" for k, v in mib.items())
        features = ", ".join(entry["features"]) or "none"
        line += f"\n         features: {features}; driver: {entry['driver']}"
    return line
