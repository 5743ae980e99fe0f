"""Anthropic Messages API shapes (wire-formats.md §8): request messages, system and tools turned into the
OpenAI-style messages chat templates read, the response body, and the streaming event sequence
message_start, content_block_start, ping, content_block_delta..., content_block_stop, message_delta,
message_stop.

Pure functions and one small state machine; routes/anthropic.py does the I/O."""

from __future__ import annotations

import json
import uuid
from typing import Any

from blazr.server.errors import ApiError, error_body
from blazr.server.sse import sse_event

UNSUPPORTED_BLOCKS = {"image": "image input", "document": "document input"}
SKIPPED_ASSISTANT_BLOCKS = ("thinking", "redacted_thinking")  # earlier reasoning is not fed back


def message_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def tool_use_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


# ---- request -------------------------------------------------------------------------------------------


def _bad(field: str, what: str) -> ApiError:
    return ApiError(400, f"{field}: {what}", param=field.split("[", 1)[0].split(".", 1)[0])


def system_text(system: Any) -> str | None:
    """`system`: a string or a list of text blocks."""
    if system is None:
        return None
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(_text_block(block, f"system[{i}]") for i, block in enumerate(system))
    raise _bad("system", "must be a string or an array of text blocks")


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise _bad(where, 'must be a text block {"type": "text", "text": "..."}')
    return block["text"]


def chat_messages(messages: list, system: Any = None) -> list[dict]:
    """Anthropic messages (+ system) -> OpenAI-style chat messages: tool_use blocks become assistant
    tool_calls and tool_result blocks `tool` messages, so the model's own template renders them."""
    if not messages:
        raise _bad("messages", "must be a non-empty array")
    converted: list[dict] = []
    text = system_text(system)
    if text:
        converted.append({"role": "system", "content": text})
    tool_names: dict[str, str] = {}  # tool_use id -> tool name, for the tool messages that answer it
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise _bad(where, 'must be an object whose \'role\' is "user" or "assistant"')
        content = message.get("content")
        if isinstance(content, str):
            converted.append({"role": message["role"], "content": content})
        elif isinstance(content, list):
            converted += _block_messages(message["role"], content, where, tool_names)
        else:
            raise _bad(f"{where}.content", "must be a string or an array of content blocks")
    return converted


def _block_messages(role: str, blocks: list, where: str, tool_names: dict[str, str]) -> list[dict]:
    texts: list[str] = []
    calls: list[dict] = []
    results: list[dict] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_block(block, at))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_call(block, at, tool_names))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, at, tool_names))
        elif kind in SKIPPED_ASSISTANT_BLOCKS and role == "assistant":
            continue
        elif isinstance(kind, str) and kind in UNSUPPORTED_BLOCKS:  # a dict/list kind is unhashable
            raise _bad(
                at, f"{UNSUPPORTED_BLOCKS[kind]} is not supported: this server has no vision model support"
            )
        else:
            raise _bad(at, f"content block type {kind!r} is not supported in a {role} message")
    out = list(results)
    if texts or calls or not results:
        message: dict[str, Any] = {"role": role, "content": "\n".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out


def _tool_call(block: dict, where: str, tool_names: dict[str, str]) -> dict:
    name, call_id = block.get("name"), block.get("id") or tool_use_id()
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name", "a tool_use block needs a tool name")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise _bad(f"{where}.input", "must be an object")
    tool_names[str(call_id)] = name
    function = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": str(call_id), "type": "function", "function": function}


def _tool_result(block: dict, where: str, tool_names: dict[str, str]) -> dict:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise _bad(f"{where}.tool_use_id", "a tool_result block needs the tool_use_id it answers")
    content = block.get("content", "")
    if isinstance(content, list):
        content = "\n".join(_text_block(part, f"{where}.content[{k}]") for k, part in enumerate(content))
    elif not isinstance(content, str):
        raise _bad(f"{where}.content", "must be a string or an array of text blocks")
    if block.get("is_error"):
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": call_id, "name": tool_names.get(call_id, ""), "content": content}


def openai_tools(tools: list | None, tool_choice: Any) -> list[dict] | None:
    """Anthropic tool definitions -> OpenAI function tools for the template; tool_choice "none" offers none
    ("any" and {"type": "tool"} are forced by the route with a constraint, see forced_tool)."""
    choice = _choice_type(tool_choice)
    if not tools or choice == "none":
        return None
    return [_openai_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def forced_tool(tool_choice: Any) -> tuple[bool, str | None]:
    """tool_choice -> (a call is forced, the tool's name or None for any): {"type": "any"} or
    {"type": "tool", "name": ...}."""
    choice = _choice_type(tool_choice)
    if choice == "any":
        return True, None
    if choice != "tool":
        return False, None
    name = tool_choice.get("name")
    if not isinstance(name, str) or not name:
        raise _bad("tool_choice", '{"type": "tool"} needs the "name" of the tool to call')
    return True, name


def _choice_type(tool_choice: Any) -> str:
    if tool_choice is None:
        return "auto"
    kind = tool_choice.get("type") if isinstance(tool_choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise _bad("tool_choice", 'must be {"type": "auto" | "any" | "tool" | "none"}')
    return kind


def _openai_tool(tool: Any, where: str) -> dict:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise _bad(where, "must be an object with a 'name'")
    if tool.get("type") not in (None, "custom"):
        raise _bad(f"{where}.type", f"server tool {tool['type']!r} is not supported; define a custom tool")
    schema = tool.get("input_schema", {"type": "object", "properties": {}})
    if not isinstance(schema, dict):
        raise _bad(f"{where}.input_schema", "must be a JSON Schema object")
    function = {"name": tool["name"], "description": tool.get("description") or "", "parameters": schema}
    return {"type": "function", "function": function}


def thinking_enabled(thinking: Any) -> bool | None:
    """`thinking`: {"type": "enabled" | "adaptive"} -> True, {"type": "disabled"} -> False, absent -> None."""
    if thinking is None:
        return None
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad("thinking", 'must be {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}')
    return kind != "disabled"


def sampling_body(body: dict) -> dict:
    """The fields protocol.sampling_params reads, under their Anthropic names (stop_sequences -> stop); a LoRA
    adapter (lora_adapter, or the one a "base:adapter" model name set) and a slot pass through."""
    names = ("max_tokens", "temperature", "top_p", "top_k", "lora_adapter", "id_slot", "slot_id")
    mapped = {name: body[name] for name in names if name in body}
    if "stop_sequences" in body:
        mapped["stop"] = body["stop_sequences"]
    return mapped


# ---- response ------------------------------------------------------------------------------------------


def stop_fields(
    finish_reason: str | None, stop_string: str | None, used_tools: bool
) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for an engine finish."""
    if used_tools:
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if stop_string:
        return "stop_sequence", stop_string
    return "end_turn", None


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
    }


def text_block(text: str) -> dict:
    return {"type": "text", "text": text}


def thinking_block(thinking: str) -> dict:
    """Local models sign nothing: the signature is empty (clients echo it back unchanged)."""
    return {"type": "thinking", "thinking": thinking, "signature": ""}


def tool_use_block(name: str, arguments: str) -> dict:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        parsed = {}
    return {
        "type": "tool_use",
        "id": tool_use_id(),
        "name": name,
        "input": parsed if isinstance(parsed, dict) else {},
    }


def message_body(
    msg_id: str, model: str, content: list[dict], stop: tuple[str, str | None], use: dict
) -> dict:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content or [text_block("")],
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": use,
    }


# ---- streaming -----------------------------------------------------------------------------------------


def event(data: dict) -> bytes:
    """An SSE event whose `event:` name equals its data's type, as the SDK expects."""
    return sse_event(data, event=data["type"])


class MessageEvents:
    """Builds the streaming events of one message; blocks open lazily as their kind of content arrives."""

    def __init__(self, msg_id: str, model: str, input_tokens: int, cached_tokens: int = 0):
        self.msg_id, self.model = msg_id, model
        self.input_tokens, self.cached_tokens = input_tokens, cached_tokens
        self.index = -1
        self.open_kind: str | None = None  # "text" | "thinking" while a block is open
        self.pinged = False

    def start(self) -> list[bytes]:
        message = message_body(self.msg_id, self.model, [], (None, None), usage(self.input_tokens, 1))
        message["content"], message["stop_reason"] = [], None
        message["usage"]["cache_read_input_tokens"] = self.cached_tokens
        return [event({"type": "message_start", "message": message})]

    def _open(self, block: dict) -> list[bytes]:
        out = self._close()
        self.index += 1
        out.append(event({"type": "content_block_start", "index": self.index, "content_block": block}))
        if not self.pinged:
            self.pinged = True
            out.append(event({"type": "ping"}))
        return out

    def _close(self) -> list[bytes]:
        if self.open_kind is None:
            return []
        self.open_kind = None
        return [event({"type": "content_block_stop", "index": self.index})]

    def _delta(self, delta: dict) -> bytes:
        return event({"type": "content_block_delta", "index": self.index, "delta": delta})

    def text(self, piece: str) -> list[bytes]:
        if not piece:
            return []
        out = [] if self.open_kind == "text" else self._open(text_block(""))
        self.open_kind = "text"
        return out + [self._delta({"type": "text_delta", "text": piece})]

    def thinking(self, piece: str) -> list[bytes]:
        if not piece:
            return []
        out = [] if self.open_kind == "thinking" else self._open(thinking_block(""))
        self.open_kind = "thinking"
        return out + [self._delta({"type": "thinking_delta", "thinking": piece})]

    def tool_use(self, name: str, arguments: str) -> list[bytes]:
        block = tool_use_block(name, arguments)
        out = self._open({**block, "input": {}})
        partial = json.dumps(block["input"], ensure_ascii=False)
        out.append(self._delta({"type": "input_json_delta", "partial_json": partial}))
        out.append(event({"type": "content_block_stop", "index": self.index}))
        return out

    def finish(self, stop: tuple[str, str | None], output_tokens: int) -> list[bytes]:
        out: list[bytes] = []
        if self.index < 0:  # every message has at least one block, as the non-streaming body does
            out, self.open_kind = self._open(text_block("")), "text"
        out += self._close()
        delta = {"stop_reason": stop[0], "stop_sequence": stop[1]}
        use = {"output_tokens": output_tokens}
        out.append(event({"type": "message_delta", "delta": delta, "usage": use}))
        out.append(event({"type": "message_stop"}))
        return out

    @staticmethod
    def error(err: ApiError) -> bytes:
        """A mid-stream error: `event: error` with the error body (the SDK raises it)."""
        return event(error_body(err, "anthropic"))
