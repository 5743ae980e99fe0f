"""One chat choice as a stream of chunk deltas: role first, then reasoning / content / tool-call deltas as
the reply parser releases them, then an empty delta with the finish reason. Logprobs ride on the next delta
that is sent after their tokens (text held back by the parsers delays them with it)."""

from __future__ import annotations

from typing import Any

from blazr.server.generation import Delta
from blazr.server.openai_format import chat_logprobs, chunk_choice, tool_call_deltas
from blazr.server.reply_parser import ReplyOptions, ReplyParser


def finish_reason_for(reason: str | None, has_calls: bool) -> str:
    """OpenAI finish_reason: a stop that produced tool calls is "tool_calls"."""
    reason = reason if reason in ("stop", "length") else "stop"
    return "tool_calls" if has_calls and reason == "stop" else reason


class ChoiceStream:
    def __init__(
        self, index: int, options: ReplyOptions, tokenizer: Any, reasoning_field: str, logprobs: bool
    ):
        self.index = index
        self.parser = ReplyParser(options)
        self.tokenizer = tokenizer
        self.reasoning_field = reasoning_field
        self.want_logprobs = logprobs
        self.pending_logprobs: list = []
        self.calls = 0
        self.reasoning_text = ""
        self.last: Delta | None = None

    def start(self) -> dict[str, Any]:
        logprobs = {"content": [], "refusal": None} if self.want_logprobs else None
        return chunk_choice(self.index, {"role": "assistant", "content": ""}, None, logprobs)

    def feed(self, delta: Delta) -> list[dict[str, Any]]:
        """The chunk choices this Delta releases (possibly none, while text is held back)."""
        self.last = delta
        if delta.logprobs:
            self.pending_logprobs += delta.logprobs
        pieces = self.parser.push(delta.text) if delta.text else []
        if delta.finished:
            pieces += self.parser.finish()
        out: list[dict[str, Any]] = []
        for piece in pieces:
            if piece.kind == "call":
                for part in tool_call_deltas(piece.call, self.calls):
                    out.append(self._choice({"tool_calls": [part]}))
                self.calls += 1
            elif piece.kind == "reasoning":
                self.reasoning_text += piece.text
                out.append(self._choice({self.reasoning_field: piece.text}))
            else:
                out.append(self._choice({"content": piece.text}))
        if delta.finished:
            out.append(self._choice({}, finish_reason_for(delta.finish_reason, self.calls > 0)))
        return out

    def _choice(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        logprobs = None
        if self.want_logprobs:
            logprobs = chat_logprobs(self.tokenizer, self.pending_logprobs)
            self.pending_logprobs = []
        return chunk_choice(self.index, delta, finish_reason, logprobs)
