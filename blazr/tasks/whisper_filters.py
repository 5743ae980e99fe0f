"""openai-whisper's logit filters, on host logits: what may come next in a Whisper transcript.

Each filter takes logits (B, V) float32 and each row's sampled tokens so far (the tokens after the prompt),
and sets the forbidden entries to -inf in place. The rules are openai-whisper's (decoding.py), which
faster-whisper and whisper.cpp follow as well: the same token sequences come out only if these match.
"""

from __future__ import annotations

import numpy as np

from blazr.tasks.whisper_vocab import WhisperVocabulary

NEG_INF = np.float32(-np.inf)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(B, V) float32 -> (B, V) float32, as openai-whisper computes it (`logits.float()`)."""
    x = np.asarray(logits, dtype=np.float32)
    shifted = x - np.max(x, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


class LogitFilters:
    """Suppress blank (at the first sampled token), the suppressed tokens, and the timestamp rules."""

    def __init__(
        self,
        vocab: WhisperVocabulary,
        suppress: tuple[int, ...],
        suppress_blank: bool = True,
        timestamps: bool = True,
        max_initial_timestamp: float | None = 1.0,
    ):
        self.vocab, self.timestamps = vocab, timestamps
        self.suppress = np.array(sorted(set(suppress)), dtype=np.int64)
        blank = vocab.encode(" ") if suppress_blank and vocab.tokenizer is not None else []
        self.blank = np.array([*blank, vocab.eot] if suppress_blank else [], dtype=np.int64)
        # openai-whisper: round(max_initial_timestamp / precision), precision = 30 s / 1500 positions
        self.max_initial = None if max_initial_timestamp is None else round(max_initial_timestamp / 0.02)

    def apply(self, logits: np.ndarray, sampled: list[list[int]]) -> None:
        if len(self.blank):
            for row, seq in enumerate(sampled):
                if not seq:
                    logits[row, self.blank] = NEG_INF
        if len(self.suppress):
            logits[:, self.suppress] = NEG_INF
        if self.timestamps:
            self._timestamp_rules(logits, sampled)

    def _timestamp_rules(self, logits: np.ndarray, sampled: list[list[int]]) -> None:
        v = self.vocab
        begin = v.timestamp_begin
        logits[:, v.no_timestamps] = NEG_INF  # timestamps are on: <|notimestamps|> is never sampled
        for row, seq in enumerate(sampled):
            last_ts = len(seq) >= 1 and seq[-1] >= begin
            penultimate_ts = len(seq) < 2 or seq[-2] >= begin
            # timestamps come in pairs (a segment's end, the next one's start), except right before EOT
            if last_ts:
                if penultimate_ts:
                    logits[row, begin:] = NEG_INF  # a pair just closed: text (or EOT) next
                else:
                    logits[row, : v.eot] = NEG_INF  # a segment just ended: its pair or EOT, no text
            stamps = [t for t in seq if t >= begin]
            if stamps:
                # never back in time, and every segment at least one step long (no endless loops)
                last = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
                logits[row, begin:last] = NEG_INF
            if not seq:
                logits[row, :begin] = NEG_INF  # a transcript starts with a timestamp
                if self.max_initial is not None:
                    logits[row, begin + self.max_initial + 1 :] = NEG_INF
        # a timestamp whenever all timestamps together are likelier than any one text token
        logprobs = log_softmax(logits)
        for row in range(len(sampled)):
            stamps = logprobs[row, begin:]
            top = np.max(stamps)
            mass = top + np.log(np.sum(np.exp(stamps - top))) if np.isfinite(top) else -np.inf
            if mass > np.max(logprobs[row, :begin]):
                logits[row, :begin] = NEG_INF
