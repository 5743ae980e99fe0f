"""DRY ("Don't Repeat Yourself"), llama.cpp's repetition penalty for sequences rather than tokens.

Over the last `dry_penalty_last_n` tokens of a sequence (prompt and output; -1: all of them) every earlier
place where the context's tail reappears is found (the tail's longest match ending there: a reversed
Z-algorithm in llama.cpp, a direct comparison here). The token that followed such a place would extend the
repeat: if the repeat is at least `dry_allowed_length` tokens long, its logit loses
dry_multiplier * dry_base ** (length - dry_allowed_length). A sequence breaker ends the repeats it lies in:
a token whose text contains one of `dry_sequence_breakers` limits how far back a repeat may reach, and is
never penalised itself.

Difference from llama.cpp, on purpose and documented: a breaker counts when one token's text contains it
whole. llama.cpp also matches a multi-character breaker spread over several tokens; for the default
breakers ("\\n", ":", "\\"", "*": single characters) the two are the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FLOAT_MAX_LOG = 88.7228391  # log of float32's largest value: the penalty's exponent is clamped below it


def breaker_tokens(token_texts: Sequence[str], breakers: Sequence[str]) -> frozenset[int]:
    """Ids of the tokens whose text contains any of the breakers."""
    wanted = [b for b in breakers if b]
    return frozenset(i for i, text in enumerate(token_texts) if any(b in text for b in wanted))


def apply_dry(
    logits: np.ndarray,
    context: Sequence[int],
    multiplier: float,
    base: float,
    allowed_length: int,
    last_n: int,
    breakers: frozenset[int],
) -> None:
    """Subtract the DRY penalty from logits (V,) in place, given the sequence's tokens so far."""
    if multiplier == 0.0 or base < 1.0 or last_n == 0:
        return
    tokens = list(context if last_n < 0 else context[-last_n:])
    n = len(tokens)
    if n <= allowed_length:
        return
    # a breaker i tokens from the end limits repeats to the i tokens after it
    limit = n
    for i in range(n):
        if tokens[n - 1 - i] in breakers:
            limit = i
            break
    if limit < allowed_length:
        return
    longest: dict[int, int] = {}  # token -> the longest repeat it would extend
    ends = np.flatnonzero(np.asarray(tokens[:-1]) == tokens[-1])  # places the last token appeared before
    for end in ends.tolist():  # the repeat of the context's tail that ends at `end`
        length = 0
        while length < limit and end - length >= 0 and tokens[end - length] == tokens[n - 1 - length]:
            length += 1
        if length >= allowed_length:
            follower = tokens[end + 1]
            longest[follower] = max(longest.get(follower, 0), length)
    max_exponent = int(FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else 0
    for token, length in longest.items():
        if token in breakers:
            continue
        exponent = length - allowed_length
        if max_exponent > 0:
            exponent = min(exponent, max_exponent)
        logits[token] -= np.float32(multiplier * base**exponent)
