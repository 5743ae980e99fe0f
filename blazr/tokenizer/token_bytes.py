"""The bytes each token id stands for, as constrained decoding needs them (a grammar matches bytes, not ids).

A `tokenizers.Tokenizer` stores token strings in one of two encodings: byte-level BPE (GPT-2, Llama 3,
Qwen2, SmolLM2) maps every byte to a printable character, so a token string is undone character by character;
SentencePiece-style vocabularies (Llama 2, Mistral, Gemma) write spaces as "▁" and bytes that have no piece as
"<0xXX>" (byte fallback). Added tokens (special or not) are their literal text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

SPM_SPACE = "\u2581"  # "▁", SentencePiece's visible space
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a SentencePiece byte-fallback piece


@dataclass(frozen=True)
class TokenBytes:
    """Per token id its bytes (b"" for ids with no token), and which ids are special (control) tokens."""

    tokens: list[bytes]
    special_ids: frozenset[int]
    kind: str  # "byte_level" | "sentencepiece" | "plain"


@functools.cache
def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's printable character -> byte map (the inverse of its bytes_to_unicode table)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shifted)
            shifted += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _state(component: Any) -> str:
    """A tokenizer component's JSON (as tokenizer.json writes it), or "" when it is absent."""
    return component.__getstate__().decode("utf-8") if component is not None else ""


def vocabulary_kind(inner: Any) -> str:
    """How token strings encode bytes, read from the decoder and pre-tokenizer (as tokenizer.json has them)."""
    parts = _state(inner.decoder) + _state(inner.pre_tokenizer)
    if '"ByteLevel"' in parts:
        return "byte_level"
    markers = ('"ByteFallback"', '"Metaspace"', SPM_SPACE, "\\u2581")
    if getattr(inner.model, "byte_fallback", False) or any(m in parts for m in markers):
        return "sentencepiece"
    return "plain"


def _byte_level(token: str) -> bytes:
    table = gpt2_byte_decoder()
    if all(c in table for c in token):
        return bytes(table[c] for c in token)
    return token.encode("utf-8")  # not a byte-level string (a stray added piece): its literal text


def _sentencepiece(token: str) -> bytes:
    match = BYTE_PIECE.fullmatch(token)
    if match:
        return bytes([int(match.group(1), 16)])
    return token.replace(SPM_SPACE, " ").encode("utf-8")


def token_bytes(inner: Any) -> TokenBytes:
    """The byte table of a `tokenizers.Tokenizer` (about 0.1 s for 50k tokens: callers cache it)."""
    kind = vocabulary_kind(inner)
    convert = {"byte_level": _byte_level, "sentencepiece": _sentencepiece}.get(kind, str.encode)
    added = inner.get_added_tokens_decoder()  # id -> AddedToken
    size = inner.get_vocab_size(with_added_tokens=True)
    tokens = [b""] * size
    for token_id in range(size):
        text = inner.id_to_token(token_id)  # per id, so duplicated strings keep every id
        if token_id in added:
            tokens[token_id] = added[token_id].content.encode("utf-8")
        elif text is not None:
            tokens[token_id] = convert(text)
    special = frozenset(i for i, tok in added.items() if tok.special and 0 <= i < size)
    return TokenBytes(tokens, special, kind)
