"""Ollama's rendering of a Go template (blazr/tokenizer/ollama_template.py): the legacy turn loop with its cut
at {{ .Response }}, the appended {{ .Response }}, the merged messages and joined system of the .Messages mode,
tool calls and schemas as Ollama's template types, the think fields and fill-in-the-middle. The expected
strings follow Ollama's template.Execute step by step (the Go engine itself is checked against Go's own output
in test_go_template.py)."""

from __future__ import annotations

import pytest

from blazr.errors import TemplateError
from blazr.tokenizer.ollama_template import OllamaTemplate, cached_template

LEGACY = "{{ if .System }}<s>{{ .System }}</s>{{ end }}[U]{{ .Prompt }}[A]{{ .Response }}[E]"


def msg(role: str, content: str, **extra) -> dict:
    return {"role": role, "content": content, **extra}


def test_legacy_template_runs_once_per_turn_and_stops_where_the_reply_begins():
    conversation = [msg("system", "S"), msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2")]
    assert OllamaTemplate(LEGACY).render(conversation) == "<s>S</s>[U]u1[A]a1[E][U]u2[A]"


def test_legacy_template_continues_an_assistant_message_given_last():
    conversation = [msg("user", "u"), msg("assistant", "Sure,")]
    assert OllamaTemplate(LEGACY).render(conversation) == "[U]u[A]Sure,"


def test_legacy_template_without_response_gets_one_appended():
    template = OllamaTemplate("<{{ .Prompt }}>")
    assert template.render([msg("user", "hi")]) == "<hi>"
    assert template.render([msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2")]) == "<u1>a1<u2>"


def test_a_system_message_after_a_turn_starts_a_new_one():
    conversation = [msg("user", "u1"), msg("system", "S2"), msg("user", "u2")]
    # the first turn (no response) is rendered when the system message arrives, then S2 opens the next
    assert OllamaTemplate(LEGACY).render(conversation) == "[U]u1[A][E]<s>S2</s>[U]u2[A]"


def test_the_cut_keeps_a_branch_open_before_the_response_and_drops_everything_after():
    template = OllamaTemplate(
        "{{ if .Prompt }}[U]{{ .Prompt }}{{ end }}[A]{{ .Response }}<end>{{ if .System }}x{{ end }}"
    )
    assert template.render([msg("system", "S"), msg("user", "u")]) == "[U]u[A]"


MESSAGES = "{{ .System }}|{{ range .Messages }}{{ .Role }}:{{ .Content }};{{ end }}"


def test_messages_mode_merges_same_role_runs_and_joins_the_system_messages():
    conversation = [msg("system", "A"), msg("system", "B"), msg("user", "x"), msg("user", "y")]
    assert OllamaTemplate(MESSAGES).render(conversation) == "A\n\nB|system:A\n\nB;user:x\n\ny;"
    tools = [msg("tool", "r1"), msg("tool", "r2")]  # tool results keep their own messages
    assert OllamaTemplate(MESSAGES).render(tools) == "|tool:r1;tool:r2;"


def test_tool_calls_and_tools_as_ollamas_template_types():
    template = OllamaTemplate(
        "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}"
        "{{ .Function.Index }}{{ end }}{{ .ToolName }}{{ end }}|{{ .Tools }}"
    )
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"b": 1, "a": "<x>"}'}}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": ["string"], "description": "A", "minLength": 1}}}, "strict": True}}]  # fmt: skip
    conversation = [msg("user", "q"), msg("assistant", "", tool_calls=calls), msg("tool", "42", name="f")]
    assert template.render(conversation, tools) == (
        'f{"a":"\\u003cx\\u003e","b":1}0f|[{"type":"function","function":{"name":"f","description":"",'
        '"parameters":{"type":"object","properties":{"a":{"type":"string","description":"A"}}}}}]'
    )  # keys sorted, HTML escaped, fields Ollama's structs do not have (minLength, strict) left out
    with pytest.raises(TemplateError, match="not a JSON object"):
        calls[0]["function"]["arguments"] = "{not json"
        template.render([msg("assistant", "", tool_calls=calls)])


@pytest.mark.parametrize(
    "think, text", [(None, "unset "), (True, "on "), (False, "off "), ("high", "on high")]
)
def test_think_fields(think, text):
    source = "{{ if .IsThinkSet }}{{ if .Think }}on{{ else }}off{{ end }}{{ else }}unset{{ end }} {{ .ThinkLevel }}"
    assert (
        OllamaTemplate(source + "{{ range .Messages }}{{ end }}").render([msg("user", "q")], None, think)
        == text
    )
    assert OllamaTemplate(source).render([msg("user", "q")], None, think) == text


def test_fill_in_the_middle():
    template = OllamaTemplate("<PRE>{{ .Prompt }}<SUF>{{ .Suffix }}<MID>")
    assert template.uses_suffix and template.render_infill("def f(", "\n    return x") == (
        "<PRE>def f(<SUF>\n    return x<MID>"
    )


def test_execution_errors_are_template_errors_and_templates_are_cached():
    with pytest.raises(TemplateError, match="can't evaluate field Nope"):
        OllamaTemplate("{{ range .Messages }}{{ .Nope }}{{ end }}").render([msg("user", "q")])
    assert cached_template(MESSAGES) is cached_template(MESSAGES)
