"""POST /v1/infill (and /infill): fill-in-the-middle in llama.cpp's request format.

The prompt is built from the model's own FIM special tokens (prefix-suffix-middle order):
  [BOS] [repo + files from input_extra] <PRE> input_prefix <SUF> input_suffix <MID> prompt
and the model continues with the middle. A vocabulary without FIM tokens is refused with a 400 naming them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from quart import Blueprint, jsonify

from blazr.server.errors import ApiError, error_body
from blazr.server.generation import Delta, generate_text, open_stream
from blazr.server.openai_format import new_id, unix_now, usage_body
from blazr.server.openai_request import load_model, request_params
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_list, get_str, read_json
from blazr.server.sse import SSE_DONE, sse_event, sse_response

bp = Blueprint("infill", __name__)
log = logging.getLogger("blazr.server")
ROUTE = "/v1/infill"

# (prefix, suffix, middle, repo name, file separator) token texts per model family; repo/sep are optional.
FIM_FAMILIES = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"),  # Qwen2.5-Coder
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<repo_name>", "<file_sep>"),  # StarCoder 1/2
    (
        "<\uff5cfim\u2581begin\uff5c>",
        "<\uff5cfim\u2581hole\uff5c>",
        "<\uff5cfim\u2581end\uff5c>",
        None,
        None,
    ),  # DeepSeek
    ("\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", None, None),  # CodeLlama
)
# llama.cpp's GGUF keys for the same tokens (the converter writes them for every FIM-capable model).
GGUF_FIM_KEYS = ("fim_pre", "fim_suf", "fim_mid", "fim_rep", "fim_sep")
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"  # llama.cpp's separator for vocabularies without <file_sep>

INFILL_REQUEST = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "input_prefix": {"type": "string", "description": "Text before the gap (alias: prefix)"},
        "input_suffix": {"type": "string", "description": "Text after the gap (alias: suffix)"},
        "input_extra": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"filename": {"type": "string"}, "text": {"type": "string"}},
            },
            "description": "Other files, placed before the FIM prefix",
        },
        "prompt": {"type": "string", "description": "Text added after the FIM middle token"},
        "max_tokens": {"type": "integer"},
        "stream": {"type": "boolean"},
    },
}
INFILL_RESPONSE = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "text_completion"},
        "model": {"type": "string"},
        "content": {"type": "string", "description": "The middle (llama.cpp name)"},
        "choices": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": "object"},
    },
}


@dataclass
class FimTokens:
    prefix: int
    suffix: int
    middle: int
    repo: int | None = None
    separator: int | None = None


def find_fim_tokens(tokenizer: Any, gguf_metadata: dict | None = None) -> FimTokens:
    """The model's FIM token ids: GGUF metadata first, then the known token texts; 400 when missing."""
    meta = gguf_metadata or {}
    ids = [meta.get(f"tokenizer.ggml.{key}_token_id") for key in GGUF_FIM_KEYS]
    if all(isinstance(i, int) for i in ids[:3]):
        return FimTokens(*ids[:3], *(i if isinstance(i, int) else None for i in ids[3:]))
    for texts in FIM_FAMILIES:
        found = [tokenizer.token_to_id(t) if t is not None else None for t in texts]
        if all(i is not None for i in found[:3]):
            return FimTokens(*found)
    looked = "; ".join(" ".join(t for t in texts[:3]) for texts in FIM_FAMILIES)
    raise ApiError(
        400,
        "this model's tokenizer has no fill-in-the-middle tokens (looked for " + looked + "); use a code "
        "model trained for infill, such as Qwen2.5-Coder or StarCoder2",
        param="model",
        code="fim_not_supported",
    )


def infill_prompt_ids(
    tokenizer: Any, fim: FimTokens, prefix: str, suffix: str, extra: list, prompt: str
) -> list[int]:
    """Token ids of a PSM infill prompt, with input_extra files as repository context (llama.cpp layout)."""

    def enc(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    ids: list[int] = [tokenizer.bos_id] if tokenizer.add_bos and tokenizer.bos_id is not None else []
    if extra and fim.repo is not None:
        ids += [fim.repo] + enc("myproject\n")
    for chunk in extra:
        if fim.separator is not None:
            ids += [fim.separator] + enc(chunk["filename"] + "\n")
        else:
            ids += enc(SNIPPET_SEPARATOR)
        ids += enc(chunk["text"])
    if extra and fim.separator is not None:
        ids += [fim.separator] + enc("filename\n")
    ids += [fim.prefix] + enc(prefix) + [fim.suffix] + enc(suffix) + [fim.middle] + enc(prompt)
    return ids


def parse_extra(body: dict) -> list[dict]:
    extra = get_list(body, "input_extra", default=[])
    chunks = []
    for i, chunk in enumerate(extra):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str):
            raise ApiError(
                400, f'\'input_extra[{i}]\' must be {{"filename": str, "text": str}}', param="input_extra"
            )
        filename = chunk.get("filename") or "tmp"
        if not isinstance(filename, str):
            raise ApiError(400, f"'input_extra[{i}].filename' must be a string", param="input_extra")
        chunks.append({"filename": filename, "text": chunk.get("text", "")})
    return chunks


def _text_field(body: dict, *names: str) -> str:
    for name in names:
        value = get_str(body, name)
        if value is not None:
            return value
    return ""


@bp.post(ROUTE)
@bp.post("/infill")
@documented(
    INFILL_REQUEST, INFILL_RESPONSE, stream="text/event-stream", summary="Fill in the middle (llama.cpp)"
)
async def infill():
    body = await read_json()
    prefix = _text_field(body, "input_prefix", "prefix")
    suffix = _text_field(body, "input_suffix", "suffix")
    prompt = _text_field(body, "prompt")
    extra = parse_extra(body)
    stream = bool(get_bool(body, "stream", default=False))
    model = await load_model(body)
    fim = find_fim_tokens(model.llm.tokenizer, model.llm.checkpoint.gguf_metadata)
    ids = infill_prompt_ids(model.llm.tokenizer, fim, prefix, suffix, extra, prompt)
    params = request_params(body, model, ("max_tokens", "n_predict"))
    response_id, created = new_id("fim-"), unix_now()
    if stream:
        deltas = await open_stream(model, ids, params, ROUTE)
        return sse_response(_events(deltas, response_id, created, model.name))
    delta = await generate_text(model, ids, params, ROUTE)
    return jsonify(_body(response_id, created, model.name, delta))


def _finish(reason: str | None) -> str:
    return "length" if reason == "length" else "stop"


def _body(response_id: str, created: int, model: str, delta: Delta) -> dict:
    finish = _finish(delta.finish_reason)
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": delta.text, "finish_reason": finish, "logprobs": None}],
        "content": delta.text,
        "stop": True,
        "usage": usage_body(delta.prompt_tokens, delta.completion_tokens, delta.cached_tokens),
    }


async def _events(
    deltas: AsyncIterator[Delta], response_id: str, created: int, model: str
) -> AsyncIterator[bytes]:
    """text_completion chunks (with llama.cpp's `content` / `stop`), then [DONE]."""
    try:
        async for delta in deltas:
            finish = _finish(delta.finish_reason) if delta.finished else None
            choice = {"index": 0, "text": delta.text, "finish_reason": finish, "logprobs": None}
            chunk = {"id": response_id, "object": "text_completion", "created": created, "model": model}
            yield sse_event({**chunk, "choices": [choice], "content": delta.text, "stop": delta.finished})
        yield SSE_DONE
    except ApiError as error:
        yield sse_event(error_body(error, "openai"))
    except Exception as error:  # the 200 is already sent: report in the stream
        log.exception("infill stream failed")
        yield sse_event(
            error_body(ApiError(500, f"generation failed: {error}", type="server_error"), "openai")
        )
    finally:
        await deltas.aclose()  # a client that left: abort the engine request now
