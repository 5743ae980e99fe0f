"""Incremental detokenization: turn generated ids into text one id at a time.

Decoding one token alone is wrong in two ways: a UTF-8 character may be split across byte tokens (the first
part decodes to U+FFFD), and SentencePiece decoders strip the leading space of a sequence. So each step
decodes a short window of recent ids and emits only what the new id added to it, holding text back while
it ends in U+FFFD. The emitted pieces concatenate to `decode(all ids)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blazr.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"


class StreamDecoder:
    """push(id) -> the text that is now final; flush() -> whatever was held back."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0  # window start: ids before it are never decoded again
        self._read = 0  # ids before it have been emitted as text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id: int) -> str:
        self._ids.append(int(token_id))
        return self._emit(final=False)

    def flush(self) -> str:
        """The held-back tail (an incomplete character decodes to U+FFFD, as `decode` would give)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        if self._read == len(self._ids):
            return ""
        # The already-emitted part of the window, decoded alone, is a prefix of the window's decode; the new
        # text is what follows it. Both decodes start at the same id, so a stripped leading space cancels.
        emitted = self._decode(self._ids[self._prefix : self._read])
        window = self._decode(self._ids[self._prefix :])
        if not final and (window.endswith(REPLACEMENT_CHAR) or len(window) <= len(emitted)):
            return ""  # an unfinished character (or nothing visible yet): wait for the next id
        if not window.startswith(emitted):
            emitted = _common_prefix(emitted, window)
        self._prefix, self._read = self._read, len(self._ids)
        return window[len(emitted) :]


def _common_prefix(a: str, b: str) -> str:
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return a[:size]
