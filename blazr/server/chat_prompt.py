"""Chat requests -> prompt tokens: message and tool validation (400 naming the field), the model's own chat
template (with `tools` when it knows them; else a Hermes-style tool system prompt), and what the reply
parser needs to know (does the model think, did the prompt open <think>, were tools offered)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from blazr import modelfile
from blazr.errors import TemplateError
from blazr.server.errors import ApiError
from blazr.server.reasoning import model_thinks, normalize_input_reasoning, prompt_opens_thinking
from blazr.server.reply_parser import ReplyOptions
from blazr.tokenizer.chat_template import builtin_template_name, resolve_template
from blazr.tokenizer.ollama_template import cached_template

ROLES = {"system", "user", "assistant", "tool", "developer", "function"}
TEXT_PART_TYPES = {"text", "input_text", "output_text"}
TOOL_PROMPT = (
    "You have access to the following tools:\n{tools}\n\n"
    "To call a tool, answer with one <tool_call></tool_call> block per call, each holding a JSON object "
    'with the tool\'s "name" and its "arguments":\n'
    '<tool_call>\n{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}\n</tool_call>'
)


@dataclass
class ChatPrompt:
    text: str
    ids: list[int]
    options: ReplyOptions


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param)


def flatten_content(content: Any, param: str) -> str | None:
    """A message's content as text: a string, null, or an array of text parts (joined by newlines)."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(param, f"'{param}' must be a string or an array of content parts")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in TEXT_PART_TYPES:
            raise _bad(
                f"{param}[{i}]",
                f"'{param}[{i}]' has type {kind!r}; this model takes text parts only (type 'text')",
            )
        if not isinstance(part.get("text"), str):
            raise _bad(f"{param}[{i}].text", f"'{param}[{i}].text' must be a string")
        texts.append(part["text"])
    return "\n".join(texts)


def parse_messages(raw: Any, param: str = "messages") -> list[dict[str, Any]]:
    """Validated OpenAI messages with text content; `developer` becomes `system`."""
    if not isinstance(raw, list) or not raw:
        raise _bad(param, f"'{param}' must be a non-empty array of messages")
    messages = []
    for i, message in enumerate(raw):
        where = f"{param}[{i}]"
        if not isinstance(message, dict):
            raise _bad(where, f"'{where}' must be an object with 'role' and 'content'")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise _bad(f"{where}.role", f"'{where}.role' must be one of {sorted(ROLES)}, got {role!r}")
        content = flatten_content(message.get("content"), f"{where}.content")
        _check_tool_calls(message.get("tool_calls"), f"{where}.tool_calls")
        if content is None and not (role == "assistant" and message.get("tool_calls")):
            raise _bad(f"{where}.content", f"'{where}.content' is required for a {role} message")
        messages.append(
            normalize_input_reasoning(
                {**message, "role": "system" if role == "developer" else role, "content": content}
            )
        )
    return messages


def _check_tool_calls(calls: Any, param: str) -> None:
    """An assistant message's history `tool_calls`: objects whose `function` has a string `name` and a
    string or object `arguments` (the templates and the Hermes rendering read them)."""
    if calls is None:
        return
    if not isinstance(calls, list):
        raise _bad(param, f"'{param}' must be an array of tool calls")
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad(f"{param}[{i}]", f'\'{param}[{i}]\' must be {{"function": {{"name": str, ...}}}}')
        if not isinstance(function.get("arguments", ""), (str, dict)):
            raise _bad(
                f"{param}[{i}].function.arguments", f"'{param}[{i}].function.arguments' must be a JSON string"
            )


def parse_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The request's function tools, or None when there are none or tool_choice is "none"."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise _bad("tools", "'tools' must be an array of {type: 'function', function: {...}} objects")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise _bad(f"tools[{i}].type", f"'tools[{i}].type' must be 'function'")
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise _bad(f"tools[{i}].function.name", f"'tools[{i}].function.name' must be a non-empty string")
    return None if tool_choice_mode(body) == "none" else tools


def tool_choice_mode(body: dict[str, Any]) -> str:
    """ "auto", "none", "required" or "function" (a named function; structured_output forces the call)."""
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none", "required"):
        return choice or "auto"
    if isinstance(choice, dict):
        return "function"
    raise _bad(
        "tool_choice", f"'tool_choice' must be 'none', 'auto', 'required' or an object, got {choice!r}"
    )


def _tool_system_prompt(tools: list[dict[str, Any]]) -> str:
    specs = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    return TOOL_PROMPT.format(tools=specs)


def _hermes_history(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """For templates that know no tools: the tool list as a system prompt, calls and results as text."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content") or ""
        if message["role"] == "assistant" and message.get("tool_calls"):
            blocks = [json.dumps(_call_as_object(c), ensure_ascii=False) for c in message["tool_calls"]]
            calls = [f"<tool_call>\n{b}\n</tool_call>" for b in blocks]
            out.append({"role": "assistant", "content": "\n".join(([content] if content else []) + calls)})
        elif message["role"] in ("tool", "function"):
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        else:
            out.append({"role": message["role"], "content": content})
    if not tools:
        return out
    prompt = _tool_system_prompt(tools)
    if out and out[0]["role"] == "system":
        out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + prompt}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


def _call_as_object(call: Any) -> dict[str, Any]:
    """A history tool call as the model writes one: {"name", "arguments": <object>}."""
    function = call.get("function", call) if isinstance(call, dict) else {}
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # not JSON: shown as the string it is
    return {"name": function.get("name"), "arguments": arguments}


def _uses_tools(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("tool_calls") or m["role"] in ("tool", "function") for m in messages)


def build_chat_prompt(
    llm: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    template: str | None = None,
    think: bool | str | None = None,
) -> ChatPrompt:
    """Render the conversation with the model's template and tokenize it (BOS only if the template lacks it).
    A derived model's SYSTEM and MESSAGEs (blazr/modelfile.py) open the conversation; its TEMPLATE replaces the
    model's Jinja template. `template` is an Ollama request's: a built-in template's name (the original
    blazr's use of the field) or an Ollama Go template, over the model's and the derived model's. `think` is
    Ollama's request field, which only Go templates read (.Think, .ThinkLevel, .IsThinkSet)."""
    messages = modelfile.with_system(llm, messages)
    tokenizer = llm.tokenizer
    builtin = builtin_template_name(template) if template else None
    go_source = None if builtin else (template or modelfile.template_of(llm))
    if go_source is not None:
        return _go_template_prompt(tokenizer, go_source, messages, tools, think)
    source = resolve_template(builtin or llm.chat_template, tokenizer)
    if tools and builtin is None and llm.chat_template is None and "tool_use" in tokenizer.chat_templates:
        source = tokenizer.chat_templates["tool_use"]
    offered = bool(tools)
    if (tools or _uses_tools(messages)) and "tool" not in source:
        messages, tools = _hermes_history(messages, tools), None
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools, template=source)
    return _tokenized(tokenizer, text, source, offered)


def _tokenized(tokenizer: Any, text: str, source: str, offered: bool) -> ChatPrompt:
    thinks = model_thinks(tokenizer, source)
    options = ReplyOptions(thinks, thinks and prompt_opens_thinking(text), parse_tools=offered)
    return ChatPrompt(text, tokenizer.encode(text, add_special_tokens=True), options)


def _go_template_prompt(
    tokenizer: Any,
    source: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    think: bool | str | None,
) -> ChatPrompt:
    """An Ollama Go template's prompt; a template that never mentions tools gets blazr's Hermes-style tool
    prompt in the system message instead, as a Jinja template without tools does."""
    offered = bool(tools)
    try:
        template = cached_template(source)
        if (tools or _uses_tools(messages)) and "tool" not in source.lower():
            messages, tools = _hermes_history(messages, tools), None
        text = template.render(messages, tools, think)
    except TemplateError as error:
        raise ApiError(400, f"the model's template failed: {error}", param="template") from None
    return _tokenized(tokenizer, text, source, offered)
