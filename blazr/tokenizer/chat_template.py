"""Chat templates: render a model's own Jinja template (as transformers does) or a built-in one.

`resolve_template(spec, tokenizer)` turns a --chat-template value into Jinja source; `render_chat_template`
renders it in a sandbox with the globals and filters real templates use (raise_exception, strftime_now,
tojson with HF's signature, loop controls, the {% generation %} tag).
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from blazr.errors import TemplateError
from blazr.tokenizer.builtin_templates import (
    BUILTIN_TEMPLATES,
    MODEL_TYPE_TEMPLATES,
    TEMPLATE_ALIASES,
    TEMPLATE_MARKERS,
)

if TYPE_CHECKING:
    from blazr.tokenizer import Tokenizer

__all__ = [
    "BUILTIN_TEMPLATES",
    "builtin_template_name",
    "guess_builtin_template",
    "render_chat_template",
    "resolve_template",
]


class _TemplateRaised(Exception):
    """What `raise_exception(...)` inside a template throws; turned into TemplateError by the renderer."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False
):
    """HF's tojson: plain json.dumps (Jinja's own escapes <, >, & and ' for HTML, which models never saw)."""
    if separators is not None:
        separators = tuple(separators)
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _GenerationTag(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` marks assistant text for training masks; for
    inference it only renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


@lru_cache(maxsize=32)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationTag]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template has a syntax error at line {e.lineno}: {e.message}") from e


def render_chat_template(
    source: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    bos_token: str = "",
    eos_token: str = "",
    **kwargs: Any,
) -> str:
    """Render Jinja `source` for `messages`. Errors (raise_exception, syntax, bad data) -> TemplateError
    carrying the template's own message."""
    template = _compile(source)
    variables = {
        **kwargs,
        "messages": _prepare_messages(messages, source),
        "add_generation_prompt": add_generation_prompt,
        "tools": tools,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    try:
        return template.render(**variables)
    except _TemplateRaised as e:
        raise TemplateError(f"chat template error: {e}") from e
    except jinja2.TemplateError as e:
        raise TemplateError(f"chat template failed: {e}") from e
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        raise TemplateError(f"chat template failed on these messages: {type(e).__name__}: {e}") from e


def _prepare_messages(messages: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """A copy of the messages. Tool-call arguments arrive as JSON strings (OpenAI API); templates that pipe
    them through tojson without an `is string` check expect objects, so those get them parsed."""
    prepared = copy.deepcopy([dict(m) for m in messages])
    wants_objects = "arguments|tojson" in source.replace(
        " ", ""
    ) and "argumentsisstring" not in source.replace(" ", "")
    if not wants_objects:
        return prepared
    for message in prepared:
        for call in message.get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                function["arguments"] = _parse_json_object(function["arguments"])
    return prepared


def _parse_json_object(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def builtin_template_name(name: str) -> str | None:
    """The canonical built-in name for a name or alias (case-insensitive), or None."""
    key = name.strip().lower()
    key = TEMPLATE_ALIASES.get(key, key)
    return key if key in BUILTIN_TEMPLATES else None


def _has_tokens(tokenizer: Tokenizer | None, texts: tuple[str, ...]) -> bool:
    return tokenizer is not None and all(tokenizer.token_to_id(t) is not None for t in texts)


def guess_builtin_template(tokenizer: Tokenizer | None, model_type: str | None = None) -> str:
    """For a model without a template: the built-in whose marker tokens its vocabulary has; else the one for
    its model_type (when the vocabulary does not contradict it); else chatml."""
    for name, markers in TEMPLATE_MARKERS.items():
        if _has_tokens(tokenizer, markers):
            return name
    if model_type is None:
        model_type = tokenizer.model_type if tokenizer is not None else ""
    by_type = MODEL_TYPE_TEMPLATES.get(model_type)
    if by_type and (tokenizer is None or by_type == "mistral"):  # [INST] is plain text in older vocabs
        return by_type
    return "chatml"


def resolve_template(spec: str | None, tokenizer: Tokenizer | None = None) -> str:
    """Jinja source for a --chat-template value: None -> the model's own template (or a guessed built-in);
    a built-in name or alias; a named template of the model (e.g. "tool_use"); inline Jinja; a file path."""
    if spec is None or spec.strip() == "":
        if tokenizer is not None and tokenizer.chat_template:
            return tokenizer.chat_template
        return BUILTIN_TEMPLATES[guess_builtin_template(tokenizer)]
    name = builtin_template_name(spec)
    if name is not None:
        return BUILTIN_TEMPLATES[name]
    if tokenizer is not None and spec in tokenizer.chat_templates:
        return tokenizer.chat_templates[spec]
    if "{{" in spec or "{%" in spec:
        return spec
    return _read_template_file(spec)


def _read_template_file(spec: str) -> str:
    path = Path(spec).expanduser()
    if not path.is_file():
        names = ", ".join(BUILTIN_TEMPLATES)
        raise TemplateError(
            f"--chat-template {spec!r} is neither a built-in template ({names}) nor an existing template file"
        )
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TemplateError(f"--chat-template file {path} cannot be read: {e}") from e
