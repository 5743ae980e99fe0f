"""Backend discovery: `get_backend("cpu" | "wgpu[:N]" | "cuda[:N]")` imports blazr.backends.<name> lazily."""

from __future__ import annotations

import importlib

from blazr.errors import ConfigError, UnsupportedError

KNOWN = {"cpu": "cpu", "numpy": "cpu", "wgpu": "wgpu", "cuda": "cuda"}


def parse_device(spec: str) -> tuple[str, int]:
    """'wgpu:1' -> ('wgpu', 1); 'cpu' -> ('cpu', 0). Raises ConfigError naming --device on bad input."""
    name, _, index = spec.strip().lower().partition(":")
    if name not in KNOWN:
        raise ConfigError(f"--device {spec!r}: unknown device; use cpu, wgpu, wgpu:N, cuda or cuda:N")
    if index and not index.isdigit():
        raise ConfigError(f"--device {spec!r}: the device index after ':' must be a number")
    return KNOWN[name], int(index or 0)


def get_backend(spec: str = "cpu", **options):
    """Build the backend named by `spec`. Optional dependencies are imported only inside the backend module."""
    name, index = parse_device(spec)
    try:
        module = importlib.import_module(f"blazr.backends.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("blazr.backends"):
            raise UnsupportedError(f"--device {spec}: the {name} backend is not built yet") from None
        extra = {"wgpu": "wgpu", "cuda": "cuda"}.get(name, name)
        raise UnsupportedError(
            f"--device {spec}: missing the Python package {e.name!r}; install it with: pip install 'blazr[{extra}]'"
        ) from None
    return module.Backend(index=index, **options)
