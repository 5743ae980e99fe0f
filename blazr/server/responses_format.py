"""The OpenAI Responses API as a translation layer over chat (as llama.cpp and Ollama do it, stateless):
`input` items -> chat messages, flat function tools -> chat tools, and a parsed reply -> `output` items and
the response object. The streaming event sequence (wire-formats.md §6) is built by `ResponseEvents`."""

from __future__ import annotations

import json
from typing import Any

from blazr.server.chat_prompt import flatten_content, parse_messages
from blazr.server.errors import ApiError
from blazr.server.openai_format import new_id, unix_now
from blazr.server.tool_calls import ToolCall


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param)


def input_messages(raw: Any, instructions: str | None) -> list[dict[str, Any]]:
    """`input` (a string or a list of message / function_call / function_call_output items) as chat messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(raw, str):
        return messages + [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _bad("input", "'input' must be a string or a non-empty array of input items")
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _bad(f"input[{i}]", f"'input[{i}]' must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            content = flatten_content(item.get("content"), f"input[{i}].content")
            messages.append({"role": item.get("role"), "content": content})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function", "function": _call_function(item, i)}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)  # parallel calls belong to one assistant turn
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning":  # earlier reasoning is not sent back to the model
            raise _bad(f"input[{i}].type", f"'input[{i}].type' {kind!r} is not supported")
    return parse_messages(messages, param="input")


def _call_function(item: dict[str, Any], i: int) -> dict[str, Any]:
    if not isinstance(item.get("name"), str):
        raise _bad(f"input[{i}].name", f"'input[{i}].name' must be a string")
    arguments = item.get("arguments", "{}")
    return {
        "name": item["name"],
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }


def chat_tools(raw: Any) -> list[dict[str, Any]] | None:
    """Responses tools ({type: function, name, description, parameters}) as chat tools."""
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise _bad("tools", "'tools' must be an array of function tools")
    tools = []
    for i, tool in enumerate(raw):
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(tool.get("name"), str)
        ):
            raise _bad(
                f"tools[{i}]",
                f"'tools[{i}]' must be {{type: 'function', name, parameters}}; only function tools run here",
            )
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        tools.append({"type": "function", "function": function})
    return tools


# ---- output items -------------------------------------------------------------------------------------


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def function_call_item(item_id: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    arguments = call.arguments if status == "completed" else ""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
    }


def output_items(content: str | None, reasoning: str | None, calls: list[ToolCall]) -> list[dict[str, Any]]:
    items = [reasoning_item(new_id("rs_"), reasoning)] if reasoning else []
    if content:
        items.append(message_item(new_id("msg_"), content))
    items += [function_call_item(new_id("fc_"), call) for call in calls]
    if not items:
        items.append(message_item(new_id("msg_"), ""))
    return items


def response_usage(
    input_tokens: int, output_tokens: int, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(head: dict[str, Any], status: str, output: list, usage: dict | None) -> dict[str, Any]:
    """The response object; `head` holds the request echo (id, created_at, model, instructions, ...)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        **head,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "output": output,
        "usage": usage,
    }


def response_head(
    model: str, instructions: str | None, params: Any, max_output: int | None, tools: list | None
) -> dict[str, Any]:
    flat_tools = [{"type": "function", **t["function"]} for t in tools or []]
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": unix_now(),
        "model": model,
        "instructions": instructions,
        "max_output_tokens": max_output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": params.temperature,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": flat_tools,
        "top_p": params.top_p,
        "truncation": "disabled",
        "metadata": {},
    }
