"""Prompt lookup (n-gram) drafting: find the last few tokens earlier in the sequence's own prompt and output
and propose what followed them. No model runs; it pays off on repetitive text (code edits, lists, quotes)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from blazr.engine.request import Request
from blazr.engine.spec.draft import Draft, SpecStats


def prompt_lookup(ids: list[int], min_n: int, max_n: int, max_len: int) -> list[int]:
    """The continuation (at most max_len tokens) of the latest earlier occurrence of the longest n-gram
    (max_n down to min_n) ending `ids`. A match with a full max_len continuation wins over a later, shorter one,
    so a short repeating cycle still yields a full draft. Empty when nothing matches."""
    tokens = np.asarray(ids, dtype=np.int64)  # (L,)
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        windows = sliding_window_view(tokens[:-1], n)  # (L - n, n): n-grams with at least one token after
        starts = np.nonzero((windows == tokens[-n:]).all(axis=1))[0] + n  # where each continuation begins
        if len(starts) == 0:
            continue
        full = starts[starts + max_len <= len(tokens)]
        begin = int(full[-1] if len(full) else starts[-1])
        return tokens[begin : begin + max_len].tolist()
    return []


class PromptLookupDrafter:
    """Drafter that matches n-grams of min_n..max_n tokens against the sequence itself."""

    def __init__(self, num_tokens: int, min_n: int, max_n: int):
        self.num_tokens = num_tokens
        self.min_n = min_n
        self.max_n = max_n
        self.stats = SpecStats()

    def propose(self, requests: list[Request], max_lens: list[int]) -> list[Draft]:
        return [
            Draft(prompt_lookup(r.all_ids, self.min_n, self.max_n, n))
            for r, n in zip(requests, max_lens, strict=True)
        ]

    def release(self, request: Request) -> None:
        """Nothing to drop: the draft is recomputed from the sequence each step."""
