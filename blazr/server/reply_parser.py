"""A model's reply, split into reasoning, content and tool calls as it streams.

Text goes through the <think> splitter first (when the model thinks), then content goes through the tool-call
parser (when the request offered tools). `parse_reply` runs the same pipeline over a whole reply, so streamed
and non-streamed answers agree."""

from __future__ import annotations

from dataclasses import dataclass, field

from blazr.server.reasoning import REASONING, ReasoningSplitter
from blazr.server.tool_calls import ToolCall, ToolCallStream


@dataclass
class ReplyPiece:
    kind: str  # "reasoning" | "content" | "call"
    text: str = ""
    call: ToolCall | None = None


@dataclass
class ReplyOptions:
    thinks: bool = False  # split <think> blocks into reasoning
    starts_inside: bool = False  # the prompt already opened <think>
    parse_tools: bool = False  # the request offered tools


class ReplyParser:
    def __init__(self, options: ReplyOptions):
        self._splitter = ReasoningSplitter(options.starts_inside) if options.thinks else None
        self._tools = ToolCallStream() if options.parse_tools else None

    def push(self, text: str) -> list[ReplyPiece]:
        if self._splitter is None:
            return self._content(text, final=False)
        return self._route(self._splitter.push(text), final=False)

    def finish(self) -> list[ReplyPiece]:
        if self._splitter is None:
            return self._content("", final=True)
        return self._route(self._splitter.finish(), final=True)

    def _route(self, parts: list[tuple[str, str]], final: bool) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        for kind, text in parts:
            if kind == REASONING:
                pieces.append(ReplyPiece("reasoning", text))
            else:
                pieces += self._content(text, final=False)
        if final:
            pieces += self._content("", final=True)
        return pieces

    def _content(self, text: str, final: bool) -> list[ReplyPiece]:
        if self._tools is None:
            return [ReplyPiece("content", text)] if text else []
        events = self._tools.push(text) if text else []
        if final:
            events += self._tools.finish()
        return [
            ReplyPiece("call", call=e.call) if e.call is not None else ReplyPiece("content", e.content)
            for e in events
            if e.call is not None or e.content
        ]


@dataclass
class Reply:
    content: str | None
    reasoning: str | None = None
    calls: list[ToolCall] = field(default_factory=list)


def parse_reply(text: str, options: ReplyOptions) -> Reply:
    """A whole reply -> content (None when tool calls leave none), reasoning (None when absent), calls."""
    if not options.thinks and not options.parse_tools:
        return Reply(text)
    parser = ReplyParser(options)
    pieces = parser.push(text) + parser.finish()
    reasoning = "".join(p.text for p in pieces if p.kind == "reasoning") or None
    content = "".join(p.text for p in pieces if p.kind == "content")
    calls = [p.call for p in pieces if p.call is not None]
    return Reply(content or (None if calls else ""), reasoning, calls)
