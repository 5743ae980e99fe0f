"""JSON Schemas of the OpenAI routes' request and response bodies, for /openapi.json (`@documented`).
They list the fields blazr reads and sends; unknown request fields are accepted and ignored."""

from __future__ import annotations

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_NULLABLE_STR = {"type": ["string", "null"]}
_STOP = {"anyOf": [_STR, {"type": "array", "items": _STR}, {"type": "null"}]}

SAMPLING = {
    "model": _STR,
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "top_k": {"type": "integer", "minimum": 0},
    "min_p": {"type": "number", "minimum": 0, "maximum": 1},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "repeat_penalty": {"type": "number", "exclusiveMinimum": 0},
    "logit_bias": {"type": "object", "additionalProperties": _NUM},
    "seed": _INT,
    "stop": _STOP,
    "n": {"type": "integer", "minimum": 1, "maximum": 16},
    "stream": _BOOL,
    "stream_options": {"type": "object", "properties": {"include_usage": _BOOL}},
    "max_tokens": {"type": "integer", "minimum": 1},
}

USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {
        "prompt_tokens": _INT,
        "completion_tokens": _INT,
        "total_tokens": _INT,
        "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": _INT}},
        "completion_tokens_details": {"type": "object", "properties": {"reasoning_tokens": _INT}},
    },
}

_TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"enum": ["text", "input_text", "output_text"]}, "text": _STR},
}
_CONTENT = {"anyOf": [_STR, {"type": "array", "items": _TEXT_PART}]}
_TOOL_CALL_IN = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": _STR,
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "properties": {"name": _STR, "arguments": _STR}},
    },
}
_TOOL_CALLS_IN = {"type": "array", "minItems": 1, "items": _TOOL_CALL_IN}
_ASSISTANT = {
    "role": {"const": "assistant"},
    "content": _CONTENT,
    "tool_calls": _TOOL_CALLS_IN,
    "reasoning_content": _STR,
    "reasoning": _STR,
}
# Every message needs content, except an assistant turn that only calls tools.
CHAT_MESSAGE = {
    "anyOf": [
        {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "role": {"enum": ["system", "developer", "user", "tool"]},
                "content": _CONTENT,
                "tool_call_id": _STR,
            },
        },
        {"type": "object", "required": ["role", "content"], "properties": _ASSISTANT},
        {
            "type": "object",
            "required": ["role", "tool_calls"],
            "properties": {**_ASSISTANT, "content": {"type": "null"}, "tool_calls": _TOOL_CALLS_IN},
        },
    ]
}
_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": _STR, "description": _STR, "parameters": {"type": "object"}},
        },
    },
}
_TOOL_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": _STR,
        "type": {"const": "function"},
        "function": {"type": "object", "properties": {"name": _STR, "arguments": _STR}},
    },
}

CHAT_REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        **SAMPLING,
        "messages": {"type": "array", "minItems": 1, "items": CHAT_MESSAGE},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "logprobs": _BOOL,
        "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
        "tools": {"type": "array", "items": _TOOL},
        "tool_choice": {"enum": ["none", "auto"]},
        "response_format": {"type": "object", "properties": {"type": {"const": "text"}}},
    },
    "dependentSchemas": {
        "top_logprobs": {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}}
    },
}

CHAT_RESPONSE = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        "id": _STR,
        "object": {"const": "chat.completion"},
        "created": _INT,
        "model": _STR,
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "message", "finish_reason", "logprobs"],
                "properties": {
                    "index": _INT,
                    "message": {
                        "type": "object",
                        "properties": {
                            "role": {"const": "assistant"},
                            "content": _NULLABLE_STR,
                            "reasoning_content": _STR,
                            "reasoning": _STR,
                            "tool_calls": {"type": "array", "items": _TOOL_CALL},
                        },
                    },
                    "finish_reason": {"enum": ["stop", "length", "tool_calls"]},
                    "logprobs": {"type": ["object", "null"]},
                },
            },
        },
        "usage": USAGE,
    },
}

_PROMPT = {
    "anyOf": [
        _STR,
        {"type": "array", "items": _STR},
        {"type": "array", "items": _INT},
        {"type": "array", "items": {"type": "array", "items": _INT}},
    ]
}

COMPLETION_REQUEST = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        **SAMPLING,
        "prompt": _PROMPT,
        "echo": _BOOL,
        "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
    },
}

COMPLETION_RESPONSE = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "id": _STR,
        "object": {"const": "text_completion"},
        "created": _INT,
        "model": _STR,
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "text", "finish_reason", "logprobs"],
                "properties": {
                    "index": _INT,
                    "text": _STR,
                    "finish_reason": {"enum": ["stop", "length"]},
                    "logprobs": {"type": ["object", "null"]},
                },
            },
        },
        "usage": USAGE,
    },
}

_NONEMPTY_STR = {"type": "string", "minLength": 1}
_EMBEDDING_INPUT = {
    "anyOf": [
        _NONEMPTY_STR,
        {"type": "array", "minItems": 1, "items": _NONEMPTY_STR},
        {"type": "array", "minItems": 1, "items": _INT},
        {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": _INT}},
    ]
}

EMBEDDING_REQUEST = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": _STR,
        "input": _EMBEDDING_INPUT,
        "encoding_format": {"enum": ["float", "base64"]},
        "dimensions": {"type": "integer", "minimum": 1},
    },
}

EMBEDDING_RESPONSE = {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "object": {"const": "embedding"},
                    "index": _INT,
                    "embedding": {"anyOf": [{"type": "array", "items": _NUM}, _STR]},
                },
            },
        },
        "model": _STR,
        "usage": {"type": "object", "properties": {"prompt_tokens": _INT, "total_tokens": _INT}},
    },
}

RESPONSES_REQUEST = {
    "type": "object",
    "required": ["input"],
    "properties": {
        **{k: v for k, v in SAMPLING.items() if k not in ("n", "stream_options", "max_tokens")},
        "input": {"anyOf": [_STR, {"type": "array", "items": {"type": "object"}}]},
        "instructions": _NULLABLE_STR,
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "tools": {"type": "array", "items": {"type": "object"}},
        "tool_choice": {"enum": ["none", "auto"]},
    },
}

RESPONSES_RESPONSE = {
    "type": "object",
    "required": ["id", "object", "created_at", "model", "output", "status"],
    "properties": {
        "id": _STR,
        "object": {"const": "response"},
        "created_at": _INT,
        "model": _STR,
        "status": {"enum": ["completed", "incomplete"]},
        "output": {"type": "array", "items": {"type": "object"}},
        "usage": {
            "type": "object",
            "properties": {"input_tokens": _INT, "output_tokens": _INT, "total_tokens": _INT},
        },
    },
}
