"""The Responses API event sequence (wire-formats.md §6): response.created, response.in_progress, then per
output item `output_item.added` ... deltas ... `output_item.done`, then response.completed (or .incomplete).
Each event is `event: <type>` + `data: {"type", "sequence_number", ...}`."""

from __future__ import annotations

from typing import Any

from blazr.server.openai_format import new_id
from blazr.server.reply_parser import ReplyPiece
from blazr.server.responses_format import (
    function_call_item,
    message_item,
    reasoning_item,
    response_object,
)
from blazr.server.sse import sse_event


class ResponseEvents:
    """Turns reply pieces into framed SSE events and keeps the output items for the final response."""

    def __init__(self, head: dict[str, Any]):
        self.head = head
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the reasoning or message item being streamed
        self._text = ""

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(data, event=kind)

    def start(self) -> list[bytes]:
        response = response_object(self.head, "in_progress", [], None)
        return [
            self.event("response.created", response=response),
            self.event("response.in_progress", response=response),
        ]

    def piece(self, piece: ReplyPiece) -> list[bytes]:
        if piece.kind == "call":
            return self.close() + self._call(piece.call)
        kind = "reasoning" if piece.kind == "reasoning" else "message"
        events = (
            []
            if self._open is not None and self._open["type"] == kind
            else self.close() + self._open_item(kind)
        )
        self._text += piece.text
        where = self._where()
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        return events + [self.event(name, **where, content_index=0, delta=piece.text, **extra)]

    def finish(self, status: str, usage: dict[str, Any]) -> list[bytes]:
        events = self.close()
        if not self.output:
            events += self._open_item("message") + self.close()
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return events + [self.event(kind, response=response_object(self.head, status, self.output, usage))]

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._open["id"], "output_index": len(self.output)}

    def _open_item(self, kind: str) -> list[bytes]:
        if kind == "reasoning":
            self._open = {"id": new_id("rs_"), "type": "reasoning", "summary": [], "content": []}
        else:
            self._open = message_item(new_id("msg_"), "", status="in_progress")
        self._text = ""
        events = [self.event("response.output_item.added", output_index=len(self.output), item=self._open)]
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                self.event("response.content_part.added", **self._where(), content_index=0, part=part)
            )
        return events

    def close(self) -> list[bytes]:
        """Finish the item being streamed (if any) with its .done events."""
        if self._open is None:
            return []
        where, text = self._where(), self._text
        if self._open["type"] == "reasoning":
            item = reasoning_item(self._open["id"], text)
            events = [self.event("response.reasoning_text.done", **where, content_index=0, text=text)]
        else:
            item = message_item(self._open["id"], text)
            part = item["content"][0]
            events = [
                self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                self.event("response.content_part.done", **where, content_index=0, part=part),
            ]
        events.append(self.event("response.output_item.done", output_index=where["output_index"], item=item))
        self.output.append(item)
        self._open, self._text = None, ""
        return events

    def _call(self, call) -> list[bytes]:
        item_id, index = new_id("fc_"), len(self.output)
        where = {"item_id": item_id, "output_index": index}
        item = function_call_item(item_id, call)
        events = [
            self.event(
                "response.output_item.added",
                output_index=index,
                item=function_call_item(item_id, call, "in_progress"),
            ),
            self.event("response.function_call_arguments.delta", **where, delta=call.arguments),
            self.event(
                "response.function_call_arguments.done", **where, name=call.name, arguments=call.arguments
            ),
            self.event("response.output_item.done", output_index=index, item=item),
        ]
        self.output.append(item)
        return events

    def error(self, code: str, message: str, param: str | None) -> bytes:
        return self.event("error", code=code, message=message, param=param)
