"""Built-in chat templates, written as Jinja like a model's own, for models that ship without one or when the
user picks one with --chat-template. Formats follow features.md §1.8.

Every template accepts message content as a string, None, or a list of {"type": "text", "text": ...} parts,
renders `tool` messages as a turn of their own, and honours add_generation_prompt.
"""

from __future__ import annotations

# Shared macro: message content as text (OpenAI-style content parts are joined).
_TEXT_MACRO = (
    "{%- macro text(content) -%}"
    "{%- if content is none -%}"
    "{%- elif content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}\n"
)

# A tool call as the JSON object most tool-trained models emit: {"name": ..., "arguments": {...}}.
_TOOL_CALL_MACRO = (
    "{%- macro tool_call_json(call, args_key) -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    "{{ '{\"name\": \"' + fn.name + '\", \"' + args_key + '\": ' }}"
    "{{ fn.arguments if fn.arguments is string else fn.arguments | tojson }}{{ '}' }}"
    "{%- endmacro -%}\n"
)

CHATML = (
    _TEXT_MACRO
    + _TOOL_CALL_MACRO
    + """{%- set ns = namespace(system=none, start=0, body='') -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set ns.system = text(messages[0].content) -%}{%- set ns.start = 1 -%}
{%- endif -%}
{%- if tools -%}
{{ '<|im_start|>system\n' }}{%- if ns.system is not none -%}{{ ns.system + '\n\n' }}{%- endif -%}
{{ '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n'
   'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools -%}{{ '\n' + (tool | tojson) }}{%- endfor -%}
{{ '\n</tools>\n\nFor each function call, return a json object with function name and arguments within '
   '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
   '<args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif ns.system is not none -%}
{{ '<|im_start|>system\n' + ns.system + '<|im_end|>\n' }}
{%- endif -%}
{%- for message in messages[ns.start:] -%}
{%- set ns.body = text(message.content) -%}
{%- if message.role == 'assistant' and message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set ns.body = ns.body + ('\n' if ns.body else '') + '<tool_call>\n' + tool_call_json(call, 'arguments')
    + '\n</tool_call>' -%}
{%- endfor -%}
{%- endif -%}
{{ '<|im_start|>' + message.role + '\n' + ns.body + '<|im_end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}
"""
)

LLAMA3 = (
    _TEXT_MACRO
    + _TOOL_CALL_MACRO
    + """{{ bos_token }}
{%- set ns = namespace(system=none, start=0) -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set ns.system = text(messages[0].content) -%}{%- set ns.start = 1 -%}
{%- endif -%}
{%- if tools -%}
{%- set intro = 'You have access to the following functions. To call a function, respond with JSON in the '
    'format {"name": function name, "parameters": dictionary of argument name and its value}. '
    'Do not use variables.' -%}
{%- set ns.system = ((ns.system + '\n\n') if ns.system is not none else '') + intro -%}
{%- for tool in tools -%}{%- set ns.system = ns.system + '\n\n' + (tool | tojson(indent=4)) -%}{%- endfor -%}
{%- endif -%}
{%- if ns.system is not none -%}
{{ '<|start_header_id|>system<|end_header_id|>\n\n' + ns.system + '<|eot_id|>' }}
{%- endif -%}
{%- for message in messages[ns.start:] -%}
{%- set role = 'ipython' if message.role == 'tool' else message.role -%}
{{ '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + text(message.content) }}
{%- if message.role == 'assistant' and message.tool_calls -%}
{%- for call in message.tool_calls -%}{{ tool_call_json(call, 'parameters') }}{%- endfor -%}
{%- endif -%}
{{ '<|eot_id|>' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}
"""
)

MISTRAL = (
    _TEXT_MACRO
    + """{{ bos_token }}
{%- set ns = namespace(system=none) -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{%- set ns.system = text(message.content) -%}
{%- elif message.role == 'assistant' -%}
{{ ' ' + text(message.content) + '</s>' }}
{%- else -%}
{%- set prefix = (ns.system + '\n\n') if ns.system is not none else '' -%}{%- set ns.system = none -%}
{{ '[INST] ' + prefix + text(message.content) + ' [/INST]' }}
{%- endif -%}
{%- endfor -%}
"""
)

PHI3 = (
    _TEXT_MACRO
    + """{%- for message in messages -%}
{{ '<|' + message.role + '|>\n' + text(message.content) + '<|end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}
"""
)

# Gemma has no system role: the system text opens the first user turn, as Gemma's own templates do.
GEMMA = (
    _TEXT_MACRO
    + """{{ bos_token }}
{%- set ns = namespace(system=none) -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{%- set ns.system = text(message.content) -%}
{%- else -%}
{%- set role = 'model' if message.role == 'assistant' else message.role -%}
{%- set prefix = (ns.system + '\n\n') if ns.system is not none and role == 'user' else '' -%}
{%- if role == 'user' -%}{%- set ns.system = none -%}{%- endif -%}
{{ '<start_of_turn>' + role + '\n' + prefix + text(message.content) + '<end_of_turn>\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}
"""
)

# DeepSeek's role markers use fullwidth bars (U+FF5C) and "▁" (U+2581), as in its vocabulary.
DEEPSEEK = (
    _TEXT_MACRO
    + """{{ bos_token }}
{%- for message in messages -%}
{%- if message.role == 'system' -%}{{ text(message.content) }}
{%- elif message.role == 'assistant' -%}{{ '<\uff5cAssistant\uff5c>' + text(message.content)
    + '<\uff5cend\u2581of\u2581sentence\uff5c>' }}
{%- else -%}{{ '<\uff5cUser\uff5c>' + text(message.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<\uff5cAssistant\uff5c>' }}{%- endif -%}
"""
)

GENERIC = (
    _TEXT_MACRO
    + """{%- for message in messages -%}
{{ message.role + ': ' + text(message.content) + '\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ 'assistant: ' }}{%- endif -%}
"""
)

BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": CHATML,
    "llama3": LLAMA3,
    "mistral": MISTRAL,
    "phi3": PHI3,
    "gemma": GEMMA,
    "deepseek": DEEPSEEK,
    "generic": GENERIC,
}

TEMPLATE_ALIASES: dict[str, str] = {
    "llama": "llama3",
    "llama2": "mistral",
    "qwen": "chatml",
    "yi": "chatml",
    "phi": "phi3",
    "gemma2": "gemma",
    "raw": "generic",
}

# Tokens a vocabulary must have for a built-in template to make sense (checked when guessing one).
TEMPLATE_MARKERS: dict[str, tuple[str, ...]] = {
    "llama3": ("<|start_header_id|>", "<|eot_id|>"),
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "gemma": ("<start_of_turn>", "<end_of_turn>"),
    "phi3": ("<|end|>", "<|assistant|>"),
    "deepseek": ("<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"),
    "mistral": ("[INST]", "[/INST]"),
}

# HF model_type -> built-in template, for models without a template of their own.
MODEL_TYPE_TEMPLATES: dict[str, str] = {
    "llama": "llama3",
    "mistral": "mistral",
    "mixtral": "mistral",
    **dict.fromkeys(["qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "yi", "internlm2", "smollm3"], "chatml"),
    **dict.fromkeys(["phi3", "phi", "phimoe"], "phi3"),
    **dict.fromkeys(["gemma", "gemma2", "gemma3", "gemma3_text"], "gemma"),
    **dict.fromkeys(["deepseek_v2", "deepseek_v3"], "deepseek"),
}
