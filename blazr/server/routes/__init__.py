"""Every route module of the server. Each module defines `bp`, a quart.Blueprint; add a new module's name to
ROUTE_MODULES and the app registers it (and /openapi.json describes it)."""

from __future__ import annotations

import importlib

ROUTE_MODULES = [
    "health",
    "models",
    "metrics_route",
    "completions",
    "chat",
    "embeddings",
    "responses",
    "anthropic",
    "ollama",
    "ollama_embed",
    "ollama_manage",
    "lora",
    "slots",
    "infill",
    "rerank",
    "tei_embed",
    "tokenize",
    "audio",
    "speech",
]

ALL_BLUEPRINTS = [importlib.import_module(f"{__name__}.{name}").bp for name in ROUTE_MODULES]
