"""The HTTP server (`blazr serve`): OpenAI, Anthropic and Ollama compatible routes on Quart + Hypercorn.

Needs the `server` extra (quart, hypercorn, prometheus_client). See docs/server.md."""

from __future__ import annotations

from blazr.server.app import create_app

__all__ = ["create_app"]
