"""OpenAI response bodies and stream chunks (wire-formats.md §2-4): ids, usage, logprobs, chat.completion,
chat.completion.chunk, text_completion and embeddings. Pure functions of their inputs, so routes stay thin."""

from __future__ import annotations

import base64
import re
import time
import uuid
from functools import lru_cache
from typing import Any

import numpy as np

from blazr.server.tool_calls import ToolCall

# finish reasons the OpenAI schemas allow; the engine's "abort" never reaches a client that is still there
CHAT_FINISH = {"stop", "length", "tool_calls"}
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def new_id(prefix: str) -> str:
    """A response id such as chatcmpl-<hex>, cmpl-<hex>, resp_<hex>."""
    return prefix + uuid.uuid4().hex


def unix_now() -> int:
    return int(time.time())


def usage_body(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0
) -> dict[str, Any]:
    """CompletionUsage, with prefix-cache hits in prompt_tokens_details.cached_tokens."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


# ---- token text and bytes for logprobs ------------------------------------------------------------------


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character a byte-level BPE token uses for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_text_and_bytes(tokenizer: Any, token_id: int) -> tuple[str, list[int]]:
    """A token's text and its exact UTF-8 bytes (a token may hold half of a multi-byte character)."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return text, list(text.encode("utf-8"))
    piece = tokenizer.id_to_token(token_id) or ""
    table = _unicode_to_byte()
    if piece and all(ch in table for ch in piece):
        return text, [table[ch] for ch in piece]
    match = _BYTE_TOKEN.match(piece)
    if match:
        return text, [int(match.group(1), 16)]
    return text, list(text.encode("utf-8"))


def chat_logprobs(tokenizer: Any, entries: list[Any]) -> dict[str, Any]:
    """ChatCompletion logprobs: {"content": [ChatCompletionTokenLogprob], "refusal": null}."""
    content = []
    for entry in entries:
        token, raw = token_text_and_bytes(tokenizer, entry.token_id)
        top = []
        for token_id, logprob in entry.top:
            alt, alt_raw = token_text_and_bytes(tokenizer, token_id)
            top.append({"token": alt, "logprob": float(logprob), "bytes": alt_raw})
        content.append({"token": token, "logprob": float(entry.logprob), "bytes": raw, "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(tokenizer: Any, entries: list[Any], text_offset: int) -> dict[str, Any]:
    """Legacy completions logprobs: parallel lists, top_logprobs as {token: logprob} maps."""
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for entry in entries:
        token, _ = token_text_and_bytes(tokenizer, entry.token_id)
        tokens.append(token)
        token_logprobs.append(float(entry.logprob))
        top: dict[str, float] = {}
        for token_id, logprob in entry.top:
            top.setdefault(token_text_and_bytes(tokenizer, token_id)[0], float(logprob))
        tops.append(top)
        offsets.append(text_offset)
        text_offset += len(token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


# ---- chat ---------------------------------------------------------------------------------------------


def tool_calls_body(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


def tool_call_deltas(call: ToolCall, index: int) -> list[dict[str, Any]]:
    """The two stream deltas of one call: id + name with empty arguments, then the arguments."""
    head = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    return [head, {"index": index, "function": {"arguments": call.arguments}}]


def chat_message(
    content: str | None, calls: list[ToolCall], reasoning: str | None, reasoning_field: str
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if reasoning is not None:
        message[reasoning_field] = reasoning
    if calls:
        message["tool_calls"] = tool_calls_body(calls)
    return message


def chat_completion(
    response_id: str, created: int, model: str, choices: list[dict], usage: dict
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def chat_choice(index: int, message: dict, finish_reason: str, logprobs: dict | None) -> dict[str, Any]:
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}


def chat_chunk(
    response_id: str, created: int, model: str, choices: list[dict], usage: dict | None | bool = False
) -> dict[str, Any]:
    """chat.completion.chunk. With stream_options.include_usage every chunk carries "usage" (null but on the
    last, choices-empty one); without it (usage=False) the key is left out."""
    chunk = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage is not False:
        chunk["usage"] = usage
    return chunk


def chunk_choice(
    index: int, delta: dict, finish_reason: str | None = None, logprobs: dict | None = None
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


# ---- completions --------------------------------------------------------------------------------------


def text_completion(
    response_id: str, created: int, model: str, choices: list[dict], usage: dict | None | bool = False
) -> dict[str, Any]:
    """text_completion is the object for both the response and its stream chunks (usage as chat_chunk)."""
    body = {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage is not False:
        body["usage"] = usage
    return body


def completion_choice(
    index: int, text: str, finish_reason: str | None, logprobs: dict | None
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


# ---- embeddings ---------------------------------------------------------------------------------------


def embedding_item(index: int, vector: np.ndarray, encoding_format: str) -> dict[str, Any]:
    """One embedding: a list of floats, or base64 of little-endian float32 (what openai-python decodes)."""
    if encoding_format == "base64":
        data: Any = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    else:
        data = [float(x) for x in np.asarray(vector, dtype=np.float32)]
    return {"object": "embedding", "index": index, "embedding": data}


def embeddings_body(model: str, vectors: np.ndarray, encoding_format: str, prompt_tokens: int) -> dict:
    """vectors: (N, D) float32, one row per input."""
    return {
        "object": "list",
        "data": [embedding_item(i, row, encoding_format) for i, row in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
