"""llama.cpp-style tokenizer routes: POST /tokenize, /detokenize and /apply-template."""

from __future__ import annotations

from quart import Blueprint, jsonify

from blazr.server.chat_prompt import parse_messages, parse_tools
from blazr.server.errors import ApiError
from blazr.server.openai_request import ANY_TASK, load_model
from blazr.server.openai_schemas import CHAT_MESSAGE
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_list, get_str, read_json
from blazr.tokenizer.chat_template import BUILTIN_TEMPLATES, builtin_template_name

bp = Blueprint("tokenize", __name__)

_MODEL = {"type": "string", "description": "Model name; omitted: the served default model"}
TOKENIZE_REQUEST = {
    "type": "object",
    "required": ["content"],
    "properties": {
        "model": _MODEL,
        "content": {"type": "string"},
        "add_special": {
            "type": "boolean",
            "default": False,
            "description": "Prepend BOS if the model uses one",
        },
        "with_pieces": {"type": "boolean", "default": False, "description": "Return {id, piece} objects"},
    },
}
TOKENIZE_RESPONSE = {
    "type": "object",
    "properties": {
        "tokens": {"type": "array", "items": {"oneOf": [{"type": "integer"}, {"type": "object"}]}}
    },
}
DETOKENIZE_REQUEST = {
    "type": "object",
    "required": ["tokens"],
    "properties": {"model": _MODEL, "tokens": {"type": "array", "items": {"type": "integer"}}},
}
DETOKENIZE_RESPONSE = {"type": "object", "properties": {"content": {"type": "string"}}}
TEMPLATE_REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": _MODEL,
        "messages": {"type": "array", "minItems": 1, "items": CHAT_MESSAGE},
        "tools": {"type": "array", "items": {"type": "object"}},
        "template": {"type": "string", "description": "A built-in template name, or inline Jinja"},
        "add_generation_prompt": {"type": "boolean", "default": True},
    },
}
TEMPLATE_RESPONSE = {"type": "object", "properties": {"prompt": {"type": "string"}}}


@bp.post("/tokenize")
@documented(TOKENIZE_REQUEST, TOKENIZE_RESPONSE, summary="Text -> token ids (llama.cpp)")
async def tokenize():
    body = await read_json()
    content = get_str(body, "content")
    if content is None:
        raise ApiError(400, "'content' is required: the text to tokenize", param="content")
    add_special = get_bool(body, "add_special", default=False)
    with_pieces = get_bool(body, "with_pieces", default=False)
    tokenizer = (await load_model(body, ANY_TASK)).llm.tokenizer
    ids = tokenizer.encode(content, add_special_tokens=add_special)
    if not with_pieces:
        return jsonify({"tokens": ids})
    return jsonify({"tokens": [{"id": i, "piece": tokenizer.decode([i])} for i in ids]})


@bp.post("/detokenize")
@documented(DETOKENIZE_REQUEST, DETOKENIZE_RESPONSE, summary="Token ids -> text (llama.cpp)")
async def detokenize():
    body = await read_json()
    tokens = get_list(body, "tokens", required=True)
    model = await load_model(body, ANY_TASK)
    for i, token in enumerate(tokens):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < model.vocab_size:
            raise ApiError(
                400, f"tokens[{i}] = {token!r} is not a token id in [0, {model.vocab_size})", param="tokens"
            )
    return jsonify({"content": model.llm.tokenizer.decode(tokens)})


@bp.post("/apply-template")
@documented(TEMPLATE_REQUEST, TEMPLATE_RESPONSE, summary="Render messages with the chat template (llama.cpp)")
async def apply_template():
    body = await read_json()
    messages = parse_messages(get_list(body, "messages", required=True))
    tools = parse_tools(body)
    add_generation_prompt = get_bool(body, "add_generation_prompt", default=True)
    model = await load_model(body)
    tokenizer = model.llm.tokenizer
    template = _template_spec(get_str(body, "template"), tokenizer)
    if template is None:
        template = model.llm.chat_template
    prompt = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tools=tools, template=template
    )
    return jsonify({"prompt": prompt})


def _template_spec(spec: str | None, tokenizer) -> str | None:
    """A client's `template`: a built-in name, one of the model's named templates, or inline Jinja (run in
    the sandbox). Never a file path: a request must not read the server's files."""
    if spec is None or not spec.strip():
        return None
    if builtin_template_name(spec) is not None or spec in tokenizer.chat_templates:
        return spec
    if "{{" in spec or "{%" in spec:
        return spec
    names = ", ".join([*BUILTIN_TEMPLATES, *tokenizer.chat_templates])
    raise ApiError(
        400,
        f"'template' {spec!r} is neither a built-in template ({names}) nor inline Jinja",
        param="template",
    )
