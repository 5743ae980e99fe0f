"""Request fields that constrain the output -> the engine's `Constraint` (a 400 naming the field when bad).

OpenAI chat / completions: response_format {"type": "json_object"} or {"type": "json_schema", "json_schema":
{"schema": ...}}; the Responses API's text.format carries "schema" at its top level. llama.cpp: `grammar`
(GBNF; a Lark grammar is also taken) and `json_schema`. vLLM: guided_json / guided_regex / guided_grammar /
guided_choice and structured_outputs {json, regex, grammar, choice}. Forced tool calls (tool_choice "required"
or a named function) become a JSON Schema for `{"name": ..., "arguments": {...}}`, which the reply parser
turns into the tool call.
"""

from __future__ import annotations

import json
from typing import Any

from blazr.engine.constraints import Constraint
from blazr.errors import ConfigError
from blazr.server.errors import ApiError

VLLM_GUIDED = {"guided_json": "json_schema", "guided_regex": "regex", "guided_grammar": "grammar"}
VLLM_STRUCTURED = {"json": "json_schema", "regex": "regex", "grammar": "grammar"}


def compiled(constraint: Constraint, param: str) -> Constraint:
    """The constraint with its grammar compiled now, so a bad spec is a 400 naming the request field."""
    try:
        constraint.grammar()
    except ConfigError as error:
        message = str(error).replace("sampling parameter constraint", f"'{param}'", 1)
        raise ApiError(400, message, param=param) from error
    return constraint


def choice_constraint(choices: Any, param: str) -> Constraint:
    """One of a list of strings, exactly (vLLM's guided_choice)."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise ApiError(400, f"'{param}' must be a non-empty array of non-empty strings", param=param)
    return Constraint("grammar", "start: " + " | ".join(json.dumps(c) for c in choices))


def response_format_constraint(fmt: Any, param: str, schema_inside: bool = True) -> Constraint | None:
    """OpenAI response_format (schema_inside: under "json_schema") or Responses text.format (at the top)."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise ApiError(400, f"'{param}.type' must be 'text', 'json_object' or 'json_schema'", param=param)
    if kind == "text":
        return None
    if kind == "json_object":
        return Constraint("json")
    holder = fmt.get("json_schema") if schema_inside else fmt
    if not isinstance(holder, dict):
        raise ApiError(400, f"'{param}.json_schema' must be an object with a 'schema'", param=param)
    schema = holder.get("schema")
    return Constraint("json") if schema is None else Constraint("json_schema", schema)


def _structured_outputs(value: Any, param: str) -> tuple[str, Constraint]:
    if not isinstance(value, dict) or len(value) != 1:
        keys = sorted([*VLLM_STRUCTURED, "choice"])
        raise ApiError(400, f"'{param}' must be an object with exactly one of {keys}", param=param)
    (key, spec), where = next(iter(value.items())), f"{param}.{next(iter(value))}"
    if key == "choice":
        return where, choice_constraint(spec, where)
    if key not in VLLM_STRUCTURED:
        raise ApiError(400, f"'{param}' has an unknown key {key!r}", param=where)
    return where, Constraint(VLLM_STRUCTURED[key], spec)


def request_constraint(
    body: dict[str, Any], format_param: str = "response_format", fmt: Any = None, schema_inside: bool = True
) -> Constraint | None:
    """The one output constraint a request asks for (None: free text); two at once is a 400. The format
    object is body[format_param] unless `fmt` is given (the Responses API's text.format)."""
    found: list[tuple[str, Constraint]] = []
    fmt = body.get(format_param) if fmt is None else fmt
    shaped = response_format_constraint(fmt, format_param, schema_inside)
    if shaped is not None:
        found.append((format_param, shaped))
    for name, kind in (("grammar", "grammar"), ("json_schema", "json_schema"), *VLLM_GUIDED.items()):
        if body.get(name) is not None:
            found.append((name, Constraint(kind, body[name])))
    if body.get("guided_choice") is not None:
        found.append(("guided_choice", choice_constraint(body["guided_choice"], "guided_choice")))
    if body.get("structured_outputs") is not None:
        found.append(_structured_outputs(body["structured_outputs"], "structured_outputs"))
    if len(found) > 1:
        names = ", ".join(f"'{name}'" for name, _ in found)
        raise ApiError(400, f"ask for one output constraint at a time, got {names}", param=found[1][0])
    return compiled(found[0][1], found[0][0]) if found else None


def format_constraint(value: Any, param: str = "format") -> Constraint | None:
    """Ollama's `format`: "json" (any JSON object) or a JSON Schema object; absent or "" is free text."""
    if value is None or value == "":
        return None
    if value == "json":
        return compiled(Constraint("json"), param)
    if isinstance(value, dict):
        return compiled(Constraint("json_schema", value), param)
    raise ApiError(400, f"'{param}' must be \"json\" or a JSON Schema object, got {value!r}", param=param)


# ---- forced tool calls -----------------------------------------------------------------------------------


def _call_schema(function: dict[str, Any]) -> dict[str, Any]:
    """{"name": <this function>, "arguments": <an object under its parameters schema>}."""
    parameters = function.get("parameters") or {}
    parameters = parameters if "type" in parameters else {"type": "object", **parameters}  # always an object
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_call_constraint(tools: list[dict[str, Any]] | None, name: str | None, param: str) -> Constraint:
    """A constraint that makes the reply one call of the named tool, or of any offered tool (name None).
    `tools` are OpenAI function tools ({"type": "function", "function": {"name", "parameters"}})."""
    functions = [t["function"] for t in tools or []]
    if not functions:
        raise ApiError(400, f"'{param}' forces a tool call but the request offers no tools", param=param)
    if name is not None:
        functions = [f for f in functions if f["name"] == name]
        if not functions:
            raise ApiError(
                400, f"'{param}' names the function {name!r}, which 'tools' does not offer", param=param
            )
    schemas = [_call_schema(f) for f in functions]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    return compiled(Constraint("json_schema", schema), param)


def forced_tool(choice: Any, param: str = "tool_choice") -> tuple[bool, str | None]:
    """OpenAI tool_choice -> (forced, function name or None for any): "required", {"type": "function",
    "function": {"name"}} (chat) or {"type": "function", "name"} (Responses)."""
    if choice == "required":
        return True, None
    if not isinstance(choice, dict):
        return False, None
    function = choice.get("function") if isinstance(choice.get("function"), dict) else choice
    name = function.get("name")
    if choice.get("type", "function") != "function" or not isinstance(name, str) or not name:
        raise ApiError(
            400,
            f'\'{param}\' must name a function: {{"type": "function", "function": {{"name": ...}}}}',
            param=param,
        )
    return True, name


def chat_constraint(
    body: dict[str, Any],
    tools: list[dict[str, Any]] | None,
    format_param: str = "response_format",
    **fmt: Any,
) -> Constraint | None:
    """A chat-style request's constraint: a forced tool call, else response_format and friends (`fmt`:
    request_constraint's fmt / schema_inside for the Responses API)."""
    forced, name = forced_tool(body.get("tool_choice"))
    shaped = request_constraint(body, format_param, **fmt)
    if not forced:
        return shaped
    if shaped is not None:
        raise ApiError(400, f"'tool_choice' forces a tool call; drop '{format_param}'", param="tool_choice")
    return tool_call_constraint(tools, name, "tool_choice")
