"""Tool-call parsing (Hermes/Qwen, Phi-4-mini / Granite, InternLM2, Command-R, Mistral, Llama 3 JSON), the <think> split, and the chat stream deltas built
from them: streamed piece by piece must give the same calls and content as the whole reply."""

from __future__ import annotations

import json

import pytest

from blazr.server.chat_stream import ChoiceStream
from blazr.server.generation import Delta
from blazr.server.reasoning import model_thinks, prompt_opens_thinking, split_reasoning
from blazr.server.reply_parser import ReplyOptions, ReplyParser, parse_reply
from blazr.server.tool_calls import ToolCallStream, parse_tool_calls

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'

CASES = {
    "hermes": (
        f"Let me check.\n<tool_call>\n{WEATHER}\n</tool_call>",
        "Let me check.",
        [("get_weather", {"city": "Paris"})],
    ),
    "hermes_two": (
        f'<tool_call>{WEATHER}</tool_call>\n<tool_call>{{"name": "now", "arguments": {{}}}}</tool_call>',
        None,
        [("get_weather", {"city": "Paris"}), ("now", {})],
    ),
    "hermes_unterminated": (f"<tool_call>\n{WEATHER}", None, [("get_weather", {"city": "Paris"})]),
    "qwen_string_arguments": (
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>',
        None,
        [("f", {"x": 1})],
    ),
    "mistral_list": (f"[TOOL_CALLS][{WEATHER}]", None, [("get_weather", {"city": "Paris"})]),
    "mistral_args": (
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]now[ARGS]{}',
        None,
        [("get_weather", {"city": "Paris"}), ("now", {})],
    ),
    "llama3_python_tag": (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    "phi4_mini": (
        f"<|tool_call|>[{WEATHER}]<|/tool_call|>",
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    "granite_unclosed": (f"<|tool_call|>[{WEATHER}]", None, [("get_weather", {"city": "Paris"})]),
    "internlm2_plugin": (
        'Checking.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
        "<|action_end|>\n",
        "Checking.",
        [("get_weather", {"city": "Paris"})],
    ),
    "command_r_action": (
        'Action: ```json\n[\n    {\n        "tool_name": "get_weather",\n        "parameters": {"city": "Paris"}\n'
        "    }\n]\n```",
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    "llama3_bare_json": (
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "now", "parameters": {}}',
        None,
        [("get_weather", {"city": "Paris"}), ("now", {})],
    ),
}


def _calls(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("name", list(CASES))
def test_parse_tool_calls_formats(name):
    text, content, expected = CASES[name]
    got_content, calls = parse_tool_calls(text)
    assert got_content == content
    assert _calls(calls) == expected
    assert all(c.id.startswith("call_") and len(c.id) == 5 + 24 for c in calls)
    assert all(isinstance(c.arguments, str) for c in calls)


@pytest.mark.parametrize(
    "text",
    ["The weather is nice.", '{"answer": 4}', "<tool_call>{not json}</tool_call> tail", "[1, 2, 3]"],
)
def test_text_without_a_valid_call_is_content(text):
    content, calls = parse_tool_calls(text)
    assert calls == []
    assert content == text.strip()


def _stream_pieces(text: str, size: int):
    stream = ToolCallStream()
    events = []
    for i in range(0, len(text), size):
        events += stream.push(text[i : i + size])
    return events + stream.finish()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("size", [1, 3, 7])
def test_streamed_parse_agrees_with_whole_reply(name, size):
    text, content, expected = CASES[name]
    events = _stream_pieces(text, size)
    assert _calls([e.call for e in events if e.call]) == expected
    assert ("".join(e.content for e in events) or None) == content


def test_stream_releases_content_before_the_call_is_complete():
    stream = ToolCallStream()
    first = stream.push("Hello there <tool")
    assert [e.content for e in first] == ["Hello there"]  # "<tool" may start a marker: held back
    assert stream.push('_call>{"name": "f", "arguments": {}}') == []
    done = stream.push("</tool_call>")
    assert [e.call.name for e in done] == ["f"]


def test_reasoning_split_whole_and_inside_prompt():
    assert split_reasoning("<think>\nsteps\n</think>\n\nThe answer is 4.") == ("steps", "The answer is 4.")
    assert split_reasoning("steps</think>4", starts_inside=True) == ("steps", "4")
    assert split_reasoning("<think>never closed") == ("never closed", "")
    assert split_reasoning("no thinking here") == (None, "no thinking here")
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n")


class _Vocab:
    def __init__(self, tokens):
        self.tokens = tokens

    def token_to_id(self, text):
        return self.tokens.get(text)


def test_model_thinks_from_vocab_or_template():
    assert model_thinks(_Vocab({"<think>": 5, "</think>": 6}), None)
    assert model_thinks(_Vocab({}), "{{ '<think>' }}...{{ '</think>' }}")
    assert not model_thinks(_Vocab({}), "{{ messages }}")


def test_reply_with_reasoning_then_tool_call():
    text = f"<think>I should look it up.</think>\n<tool_call>{WEATHER}</tool_call>"
    reply = parse_reply(text, ReplyOptions(thinks=True, parse_tools=True))
    assert reply.reasoning == "I should look it up."
    assert reply.content is None
    assert _calls(reply.calls) == [("get_weather", {"city": "Paris"})]


def test_reply_without_options_is_untouched():
    text = "  <think>x</think> <tool_call>{}</tool_call>  "
    assert parse_reply(text, ReplyOptions()).content == text


def test_reply_parser_streams_think_tags_split_across_pieces():
    parser = ReplyParser(ReplyOptions(thinks=True))
    pieces = []
    for part in ["<thi", "nk>ab", "c</th", "ink>\n\nHel", "lo"]:
        pieces += parser.push(part)
    pieces += parser.finish()
    assert "".join(p.text for p in pieces if p.kind == "reasoning") == "abc"
    assert "".join(p.text for p in pieces if p.kind == "content") == "Hello"


class _ByteTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return bytes(ids).decode("utf-8", errors="replace")

    def id_to_token(self, token_id):
        return chr(token_id)


def _delta(text, finished=False, reason=None):
    return Delta(text, [], None, finished, reason, 3, 1, 0)


def test_choice_stream_emits_tool_call_deltas_and_finish_reason():
    choice = ChoiceStream(0, ReplyOptions(parse_tools=True), _ByteTokenizer(), "reasoning_content", False)
    assert choice.start()["delta"] == {"role": "assistant", "content": ""}
    out = []
    text = f"Checking. <tool_call>{WEATHER}</tool_call>"
    for i in range(0, len(text), 5):
        out += choice.feed(_delta(text[i : i + 5]))
    out += choice.feed(_delta("", finished=True, reason="stop"))
    deltas = [c["delta"] for c in out]
    assert "".join(d.get("content", "") for d in deltas) == "Checking."
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["index"] == 0 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert set(calls[1]) == {"index", "function"} and json.loads(calls[1]["function"]["arguments"]) == {
        "city": "Paris"
    }
    assert out[-1]["delta"] == {} and out[-1]["finish_reason"] == "tool_calls"
    assert all(c["finish_reason"] is None for c in out[:-1])


def test_choice_stream_reasoning_field_and_length_finish():
    choice = ChoiceStream(1, ReplyOptions(thinks=True), _ByteTokenizer(), "reasoning", False)
    out = choice.feed(_delta("<think>hmm</think>Four"))
    out += choice.feed(_delta("", finished=True, reason="length"))
    assert {"reasoning": "hmm"} in [c["delta"] for c in out]
    assert {"content": "Four"} in [c["delta"] for c in out]
    assert out[-1]["finish_reason"] == "length" and all(c["index"] == 1 for c in out)


def test_chat_prompt_tools_through_template_or_hermes_fallback(tiny_gguf):
    from types import SimpleNamespace

    from blazr.loaders import load_checkpoint
    from blazr.server.chat_prompt import build_chat_prompt, parse_messages
    from blazr.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(load_checkpoint(tiny_gguf))
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages = parse_messages(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ]
    )
    plain = build_chat_prompt(SimpleNamespace(tokenizer=tokenizer, chat_template=None), messages, [tool])
    assert plain.text.startswith("<system>Be brief.\n\nYou have access to the following tools:\n")
    assert (
        '<assistant><tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        in plain.text
    )
    assert "<user><tool_response>\nsunny\n</tool_response>" in plain.text
    assert plain.options.parse_tools and plain.ids == tokenizer.encode(plain.text)
    own = "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.role }};{% endfor %}"
    aware = build_chat_prompt(SimpleNamespace(tokenizer=tokenizer, chat_template=own), messages, [tool])
    assert aware.text == "[get_weather]system;user;assistant;tool;"  # the model's template gets `tools`
