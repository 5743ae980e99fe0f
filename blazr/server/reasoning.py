"""Reasoning split for models that think in `<think>...</think>` blocks (DeepSeek-R1, Qwen3, SmolLM3, ...).

`ReasoningSplitter` is the one implementation: streaming routes push decoded text and get ("reasoning" |
"content", text) pieces back; `split_reasoning` runs it over a whole reply, so both paths agree. Whitespace
right inside the tags and right after `</think>` is dropped. An unterminated last block counts as reasoning.
"""

from __future__ import annotations

from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
REASONING = "reasoning"
CONTENT = "content"
# What the delta / message key is called (llama.cpp and SGLang; vLLM and Ollama use "reasoning").
REASONING_FIELD = "reasoning_content"
INPUT_REASONING_KEYS = ("reasoning_content", "reasoning")


def model_thinks(tokenizer: Any, template_source: str | None) -> bool:
    """Whether replies may hold <think> blocks: the vocabulary has both tags, or the template uses them."""
    has_tokens = (
        tokenizer.token_to_id(THINK_OPEN) is not None and tokenizer.token_to_id(THINK_CLOSE) is not None
    )
    return has_tokens or bool(template_source and THINK_CLOSE in template_source)


def prompt_opens_thinking(prompt_text: str) -> bool:
    """Templates such as DeepSeek-R1's end the generation prompt with `<think>`: the reply starts inside it."""
    tail = prompt_text.rstrip()
    return tail.endswith(THINK_OPEN)


def _partial_len(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper prefix of `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class ReasoningSplitter:
    """push(text) -> [(kind, text)], finish() -> the rest. kind is REASONING or CONTENT."""

    def __init__(self, starts_inside: bool = False):
        self._inside = starts_inside
        self._buffer = ""
        self._trim_next = True  # drop whitespace at the start of the next piece (after a tag)
        self._held_space = ""  # reasoning's trailing whitespace, dropped if </think> follows

    def push(self, text: str) -> list[tuple[str, str]]:
        self._buffer += text
        pieces: list[tuple[str, str]] = []
        marker = THINK_CLOSE if self._inside else THINK_OPEN
        while marker in self._buffer:
            before, _, self._buffer = self._buffer.partition(marker)
            self._emit(before, pieces)
            self._inside, self._trim_next, self._held_space = not self._inside, True, ""
            marker = THINK_CLOSE if self._inside else THINK_OPEN
        keep = _partial_len(self._buffer, marker)
        ready, self._buffer = (
            self._buffer[: len(self._buffer) - keep],
            self._buffer[len(self._buffer) - keep :],
        )
        self._emit(ready, pieces)
        return pieces

    def finish(self) -> list[tuple[str, str]]:
        pieces: list[tuple[str, str]] = []
        rest, self._buffer = self._buffer, ""
        self._emit(rest, pieces)
        return pieces

    def _emit(self, text: str, pieces: list[tuple[str, str]]) -> None:
        if self._trim_next:
            text = text.lstrip()
            if not text:
                return
            self._trim_next = False
        if not self._inside:
            if text:
                pieces.append((CONTENT, text))
            return
        body = text.rstrip()  # hold reasoning's trailing whitespace until we know </think> is not next
        if body:
            pieces.append((REASONING, self._held_space + body))
            self._held_space = ""
        self._held_space += text[len(body) :]


def split_reasoning(text: str, starts_inside: bool = False) -> tuple[str | None, str]:
    """A whole reply -> (reasoning or None, content)."""
    splitter = ReasoningSplitter(starts_inside)
    pieces = splitter.push(text) + splitter.finish()
    reasoning = "".join(t for kind, t in pieces if kind == REASONING)
    content = "".join(t for kind, t in pieces if kind == CONTENT)
    return (reasoning or None), content


def normalize_input_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    """Accept both `reasoning_content` and `reasoning` on input messages; templates read reasoning_content."""
    if "reasoning_content" not in message and isinstance(message.get("reasoning"), str):
        return {**message, "reasoning_content": message["reasoning"]}
    return message
