"""Streaming response helpers: Server-Sent Events (OpenAI, Anthropic) and NDJSON (Ollama).

When the client disconnects, Quart cancels the task iterating the body; the CancelledError reaches the
chunk iterator, whose own `finally` (generation.generate_stream) aborts the engine request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from quart import Response

SSE_DONE: bytes = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def compact_json(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse_event(data: dict | str, event: str | None = None) -> bytes:
    """One SSE event: an optional `event:` line, then `data: <compact json>` and a blank line."""
    payload = data if isinstance(data, str) else compact_json(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


async def _closing(chunks: AsyncIterator) -> AsyncIterator:
    """Iterate `chunks` and always close it, so its cleanup runs on cancel as well as on exhaustion."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


def sse_response(chunks: AsyncIterator[bytes], status: int = 200) -> Response:
    """A text/event-stream response over already-framed SSE chunks."""
    response = Response(_closing(chunks), status=status, content_type="text/event-stream")
    response.headers.update(SSE_HEADERS)
    response.timeout = None  # streams are bounded by the generation deadline, not Quart's send timeout
    return response


async def _ndjson_lines(lines: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    try:
        async for line in lines:
            yield (compact_json(line) + "\n").encode()
    finally:
        aclose = getattr(lines, "aclose", None)
        if aclose is not None:
            await aclose()


def ndjson_response(lines: AsyncIterator[dict], status: int = 200) -> Response:
    """An application/x-ndjson response: one compact JSON object per line (Ollama streams)."""
    response = Response(_ndjson_lines(lines), status=status, content_type="application/x-ndjson")
    response.headers.update({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    response.timeout = None
    return response
