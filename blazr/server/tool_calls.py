"""Tool calls in model output, in each family's published format:
  * blocks of JSON between an opening and a closing marker (BLOCKS): Hermes / Qwen / SmolLM3
    `<tool_call>{json}</tool_call>`, Phi-4-mini and Granite `<|tool_call|>[json]<|/tool_call|>` (Granite leaves
    it unclosed at the end of the reply), InternLM2 `<|action_start|><|plugin|>{json}<|action_end|>`, Command-R
    `Action: ```json [{"tool_name", "parameters"}] ````;
  * Mistral `[TOOL_CALLS]` (a JSON list, or `name[ARGS]{json}` in newer tokenizers) and Llama 3 JSON
    (`<|python_tag|>`, or the whole reply one `{"name", "parameters"}` object).

`ToolCallStream` is the one parser: streaming routes push text as it is decoded and get content pieces and
finished calls back; `parse_tool_calls` runs the same parser over a whole reply, so both paths agree.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
MISTRAL_MARKER, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
PYTHON_TAG = "<|python_tag|>"
# opening marker -> closing marker of a block of JSON calls; a block still open when the reply ends is parsed too
BLOCKS = {
    HERMES_OPEN: HERMES_CLOSE,
    "<|tool_call|>": "<|/tool_call|>",
    "<|action_start|><|plugin|>": "<|action_end|>",
    "Action: ```json": "```",
}
# A reply that starts with one of these is held whole and parsed at the end (the call is the entire reply).
WHOLE_REPLY_STARTS = (MISTRAL_MARKER, PYTHON_TAG, "{")
INLINE_MARKERS = (*BLOCKS, MISTRAL_MARKER)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON text, as the OpenAI API sends it
    id: str = field(default_factory=new_call_id)


@dataclass
class StreamEvent:
    """Either a piece of plain content or one complete tool call."""

    content: str = ""
    call: ToolCall | None = None


def _call_from_object(obj: object) -> ToolCall | None:
    """{"name"|"tool_name": str, "arguments"|"parameters": object|str} -> ToolCall; anything else -> None."""
    if isinstance(obj, dict) and "name" not in obj and "tool_name" in obj:  # Command-R
        obj = {"name": obj["tool_name"], "parameters": obj.get("parameters", {})}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None  # a string argument must itself be JSON
        return ToolCall(obj["name"], args)
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _json_values(text: str, separators: str = " \t\r\n;,") -> list[object] | None:
    """All JSON values in `text` separated by whitespace, `;` or `,`; None when anything else is there."""
    decoder, values, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos] in separators:
            pos += 1
        if pos == len(text):
            return values
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return None
        values.append(value)


def _calls_from_json(text: str) -> list[ToolCall] | None:
    """One or more call objects (or lists of them) in JSON text; None unless every value is a call."""
    values = _json_values(text)
    if not values:
        return None
    flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
    calls = [_call_from_object(v) for v in flat]
    return calls if calls and all(c is not None for c in calls) else None


def _mistral_calls(text: str) -> list[ToolCall] | None:
    """The text after `[TOOL_CALLS]`: a JSON list of calls, or `name[ARGS]{json}` per marker."""
    parts = [p for p in text.split(MISTRAL_MARKER) if p.strip()]
    calls: list[ToolCall] = []
    for part in parts:
        if MISTRAL_ARGS in part:
            name, _, args = part.partition(MISTRAL_ARGS)
            values = _json_values(args, separators=" \t\r\n")
            call = _call_from_object({"name": name.strip(), "arguments": values[0]}) if values else None
            found = [call] if call is not None and len(values) == 1 else None
        else:
            found = _calls_from_json(part)
        if not found:
            return None
        calls += found
    return calls or None


def parse_whole_reply(text: str) -> list[ToolCall] | None:
    """Calls when the entire reply is a Mistral or Llama 3 tool call; None when it is plain content."""
    body = text.strip()
    if body.startswith(MISTRAL_MARKER):
        return _mistral_calls(body[len(MISTRAL_MARKER) :])
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :]
    return _calls_from_json(body)


def _partial_marker_len(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that could still grow into one of the markers."""
    best = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-size:]):
                best = size
                break
    return best


class ToolCallStream:
    """Incremental parser: push(text) and finish() return StreamEvents. Content outside calls comes out
    with leading and trailing whitespace removed (as a non-streaming reply's content is stripped)."""

    def __init__(self) -> None:
        self._buffer = ""  # undecided text: a possible marker start, or a call not yet closed
        self._mode = "start"  # start | content | block (inside a BLOCKS pair) | whole (held to the end)
        self._open = ""  # the opening marker of the block being read
        self._held_space = ""  # whitespace after content, emitted only if more content follows
        self._seen_content = False

    def push(self, text: str) -> list[StreamEvent]:
        self._buffer += text
        events: list[StreamEvent] = []
        progressed = True
        while progressed:
            progressed = self._step(events)
        return events

    def finish(self) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        rest, self._buffer = self._buffer, ""
        if self._mode == "whole":
            calls = parse_whole_reply(rest)
            events += [StreamEvent(call=c) for c in calls] if calls else self._content(rest)
        elif self._mode == "block":
            calls = _calls_from_json(rest[len(self._open) :])  # an unterminated last block
            events += [StreamEvent(call=c) for c in calls] if calls else self._content(rest)
        else:
            events += self._content(rest)
        return events

    def _step(self, events: list[StreamEvent]) -> bool:
        """Advance one state transition; False when more text is needed."""
        if self._mode == "start":
            return self._step_start()
        if self._mode == "block":
            close = BLOCKS[self._open]
            end = self._buffer.find(close, len(self._open))
            if end < 0:
                return False
            calls = _calls_from_json(self._buffer[len(self._open) : end])
            raw = self._buffer[: end + len(close)]
            events += [StreamEvent(call=c) for c in calls] if calls else self._content(raw)
            self._buffer, self._mode = self._buffer[end + len(close) :], "content"
            return True
        if self._mode == "content":
            return self._step_content(events)
        return False  # "whole": everything waits for finish()

    def _step_start(self) -> bool:
        body = self._buffer.lstrip()
        if not body:
            return False
        if any(body.startswith(s) for s in WHOLE_REPLY_STARTS):
            self._mode = "whole"
            return False
        if any(s.startswith(body) for s in WHOLE_REPLY_STARTS):
            return False  # e.g. "[TOOL_" so far
        self._mode = "content"
        return True

    def _step_content(self, events: list[StreamEvent]) -> bool:
        hits = [(self._buffer.find(m), m) for m in INLINE_MARKERS if m in self._buffer]
        if hits:
            pos, marker = min(hits)
            events += self._content(self._buffer[:pos])
            self._buffer = self._buffer[pos:]
            self._mode, self._open = ("block", marker) if marker in BLOCKS else ("whole", "")
            if self._mode == "whole":
                self._buffer = self._buffer.lstrip()
            return True
        keep = _partial_marker_len(self._buffer, INLINE_MARKERS)
        ready, self._buffer = (
            self._buffer[: len(self._buffer) - keep],
            self._buffer[len(self._buffer) - keep :],
        )
        events += self._content(ready)
        return False

    def _content(self, text: str) -> list[StreamEvent]:
        """Content with whitespace trimmed at both ends of the whole reply's content."""
        if not self._seen_content:
            text = text.lstrip()
        body = text.rstrip()
        if not body:
            self._held_space += text
            return []
        piece, self._held_space = self._held_space + body, text[len(body) :]
        self._seen_content = True
        return [StreamEvent(content=piece)]


def parse_tool_calls(text: str) -> tuple[str | None, list[ToolCall]]:
    """A whole reply -> (content, tool calls); content is None when calls leave no text. Text without a
    valid call is all content (stripped, as the streaming path sends it)."""
    stream = ToolCallStream()
    events = stream.push(text) + stream.finish()
    calls = [e.call for e in events if e.call is not None]
    content = "".join(e.content for e in events)
    return (content or None) if calls else content, calls
