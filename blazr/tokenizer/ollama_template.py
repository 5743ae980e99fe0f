"""Ollama's prompt templates (a Modelfile's TEMPLATE): Go text/template rendered as Ollama renders it.

What a template sees follows Ollama's template package: the functions json, currentDate and yesterdayDate;
missing map keys are empty; a template that mentions .Messages gets the whole conversation (.System is every
system message joined, .Messages the messages with consecutive same-role ones merged, .Tools the tools), with
Ollama's template types: messages are structs (Role, Content, Thinking, Images, ToolCalls, ToolName,
ToolCallID; an unknown field is an error), a tool call's .Function.Arguments and a tool list print as JSON,
tool schemas keep the fields Ollama's api.Tool keeps (type/items/function: name, description, parameters:
type, $defs, items, required, properties: type, items, description, enum), map keys sorted as Go's JSON does.
A template without .Messages is a legacy one: it runs once per (system, prompt, response) turn with
.System/.Prompt/.Response, and the last turn is cut just before its {{ .Response }}, which is appended when
the template has none. With a `suffix` (fill-in-the-middle) it runs once over .Prompt and .Suffix.
"""

from __future__ import annotations

import copy
import datetime
import json
from functools import lru_cache
from typing import Any

from blazr.errors import TemplateError
from blazr.tokenizer.go_template import GoSlice, GoStruct, GoTemplate, JsonList, JsonMap, marshal
from blazr.tokenizer.go_template import nodes as n


def _date(days_back: int) -> str:
    return (datetime.date.today() - datetime.timedelta(days=days_back)).isoformat()


FUNCTIONS = {
    "json": marshal,
    "currentDate": lambda *_format: _date(0),  # Ollama takes and ignores a format argument
    "yesterdayDate": lambda *_format: _date(1),
}
_RESPONSE = n.Action(n.Pipeline([n.Command([n.FieldChain(["Response"])])]))


class OllamaTemplate:
    def __init__(self, source: str):
        self.source = source
        self.template = GoTemplate(source, FUNCTIONS)
        names = self.template.field_names()
        self.uses_messages = "messages" in names
        self.uses_suffix = "suffix" in names
        if not self.uses_messages and "response" not in names:  # Ollama appends {{ .Response }}
            self.template.root.append(_RESPONSE)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        think: bool | str | None = None,
    ) -> str:
        """The prompt for a conversation (OpenAI-style message dicts, as blazr's routes hold them)."""
        thinking = _think_values(think)
        system, merged = _collate(messages)
        if self.uses_messages:
            data = {
                "System": system,
                "Messages": [_message(m) for m in merged],
                "Tools": _tools(tools),
                "Response": "",
            } | thinking
            return self.template.execute(data)
        out, turn = [], {"System": "", "Prompt": "", "Response": ""}
        for message in merged:
            role, content = message["role"], message.get("content") or ""
            if (role == "system" and (turn["Prompt"] or turn["Response"])) or (
                role == "user" and turn["Response"]
            ):
                out.append(self.template.execute(turn | thinking))
                turn = {"System": "", "Prompt": "", "Response": ""}
            key = {"system": "System", "user": "Prompt", "assistant": "Response"}.get(role)
            if key is not None:
                turn[key] = content
        out.append(self.template.execute(turn | thinking, _cut_at_response(self.template.root)))
        return "".join(out)

    def render_infill(self, prompt: str, suffix: str) -> str:
        return self.template.execute(
            {"Prompt": prompt, "Suffix": suffix, "Response": ""} | _think_values(None)
        )


@lru_cache(maxsize=64)
def cached_template(source: str) -> OllamaTemplate:
    """A parsed template per source text (templates are read-only once built)."""
    return OllamaTemplate(source)


def _think_values(think: bool | str | None) -> dict[str, Any]:
    level = think if isinstance(think, str) else ""
    return {"Think": bool(think), "ThinkLevel": level, "IsThinkSet": think is not None}


def _collate(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Every system message's text joined, and the messages with consecutive same-role ones (tool results
    excepted) merged by a blank line, as Ollama's collate does."""
    system, merged = [], []
    for message in messages:
        content = message.get("content") or ""
        if message["role"] == "system":
            system.append(content)
        if merged and merged[-1]["role"] == message["role"] and message["role"] != "tool":
            merged[-1]["content"] = (merged[-1].get("content") or "") + "\n\n" + content
        else:
            merged.append(copy.copy(message))
    return "\n\n".join(system), merged


def _arguments(raw: Any) -> JsonMap:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise TemplateError(f"a tool call's arguments are not a JSON object: {raw[:80]!r}") from None
    return JsonMap(raw if isinstance(raw, dict) else {})


def _message(message: dict[str, Any]) -> GoStruct:
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", call)
        fields = {
            "Index": function.get("index", i),
            "Name": function.get("name") or "",
            "Arguments": _arguments(function.get("arguments")),
        }
        calls.append(
            GoStruct(
                "template.templateToolCall",
                {
                    "ID": call.get("id") or "",
                    "Function": GoStruct("template.templateToolCallFunction", fields),
                },
            )
        )
    thinking = message.get("thinking") or message.get("reasoning_content") or ""
    fields = {
        "Role": message["role"],
        "Content": message.get("content") or "",
        "Thinking": thinking,
        "Images": GoSlice.of(None),
        "ToolCalls": GoSlice.of(calls or None),
        "ToolName": message.get("tool_name") or message.get("name") or "",
        "ToolCallID": message.get("tool_call_id") or "",
    }
    return GoStruct("template.templateMessage", fields, pointer=True)


_PROPERTY = (("type", "Type"), ("items", "Items"), ("description", "Description"), ("enum", "Enum"))


def _property(schema: Any) -> GoStruct:
    schema = schema if isinstance(schema, dict) else {}
    kind = schema.get("type") or ""
    if isinstance(kind, list) and len(kind) == 1:
        kind = kind[0]  # Ollama's PropertyType prints and marshals one type as a string
    enum = schema.get("enum")
    fields = {  # Go's zero values for what the schema leaves out
        "Type": kind if isinstance(kind, (str, list)) else "",
        "Items": schema.get("items"),
        "Description": schema.get("description") if isinstance(schema.get("description"), str) else "",
        "Enum": GoSlice.of(enum if isinstance(enum, list) else None),
    }
    return GoStruct("api.ToolProperty", fields, {go: (key, True) for key, go in _PROPERTY})


def _tools(tools: list[dict[str, Any]] | None) -> JsonList:
    if not tools:
        return JsonList.of(None)
    out = []
    for tool in tools:
        function = tool.get("function") or {}
        params = function.get("parameters") or {}
        properties = JsonMap({k: _property(v) for k, v in (params.get("properties") or {}).items()})
        parameters = GoStruct(
            "template.templateToolFunctionParameters",
            {
                "Type": params.get("type") or "",
                "Defs": params.get("$defs"),
                "Items": params.get("items"),
                "Required": GoSlice.of(params.get("required")),
                "Properties": properties,
            },
            {
                "Type": ("type", False),
                "Defs": ("$defs", True),
                "Items": ("items", True),
                "Required": ("required", True),
                "Properties": ("properties", False),
            },
        )
        function_struct = GoStruct(
            "template.templateToolFunction",
            {
                "Name": function.get("name") or "",
                "Description": function.get("description") or "",
                "Parameters": parameters,
            },
            {
                "Name": ("name", False),
                "Description": ("description", False),
                "Parameters": ("parameters", False),
            },
        )
        fields = {
            "Type": tool.get("type") or "function",
            "Items": tool.get("items"),
            "Function": function_struct,
        }
        tags = {"Type": ("type", False), "Items": ("items", True), "Function": ("function", False)}
        out.append(GoStruct("template.templateTool", fields, tags))
    return JsonList.of(out)


def _cut_at_response(root: list[Any]) -> list[Any]:
    """The tree with everything after the first {{ .Response }} removed (Ollama's deleteNode): the last turn's
    prompt ends where the model's reply begins (or goes on from an assistant message given last). As in
    Ollama, a branch's own condition is not searched, and a later stage of the pipeline holding .Response
    drops the whole action."""
    cut = False

    def walk(node: Any) -> Any:
        nonlocal cut
        if isinstance(node, n.FieldChain) and "Response" in node.names:
            cut = True
            return node
        if cut:
            return None
        if isinstance(node, list):
            return [kept for kept in (walk(child) for child in node) if kept is not None]
        if isinstance(node, n.Branch):
            body = walk(node.body) or []
            orelse = (walk(node.orelse) or []) if node.orelse is not None else None
            return n.Branch(node.kind, node.pipe, body, orelse)
        if isinstance(node, n.Action):
            pipe = walk(node.pipe)
            return n.Action(pipe) if pipe is not None else None
        if isinstance(node, n.Pipeline):
            commands = []
            for command in node.commands:
                args = [kept for kept in (walk(arg) for arg in command.args) if kept is not None]
                if not args:
                    return None
                commands.append(n.Command(args))
            return n.Pipeline(commands, node.declare, node.assign) if commands else None
        return node

    return walk(root)
