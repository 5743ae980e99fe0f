"""Word timestamps for Whisper segments, as openai-whisper computes them (its timing.py).

The decoder reads the window's text once more; the cross-attention weights of the model's alignment heads
(heads whose attention follows the audio) give, per text token, a distribution over the 20 ms encoder
positions. Normalised per position, median-filtered and averaged over the heads, they form a cost matrix;
dynamic time warping finds the monotonic token -> time path, and a word starts where its first token's
path first moves. Probabilities are the mean probability of each word's tokens.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from blazr.tasks.transcript import Segment, Word

TOKENS_PER_SECOND = 50  # encoder positions per second of audio
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
NO_SPACE_LANGUAGES = ("zh", "ja", "th", "lo", "my", "yue")  # words split by character, not by spaces


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def alignment_heads(config: dict, layers: int, heads: int) -> list[tuple[int, int]]:
    """The checkpoint's (layer, head) alignment heads, else openai-whisper's default: every head of the
    decoder's second half."""
    listed = config.get("alignment_heads")
    if listed:
        return [(int(layer), int(head)) for layer, head in listed]
    return [(layer, head) for layer in range(layers // 2, layers) for head in range(heads)]


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a sliding window of odd `width` along the last axis, reflect-padded."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)  # (..., N, width)
    return np.partition(windows, pad, axis=-1)[..., pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through cost (N, M): (row indices, column indices) along it."""
    from blazr.tasks.word_timing_dtw import dtw_path

    path = dtw_path(np.ascontiguousarray(cost, dtype=np.float64))
    return path[0], path[1]


def split_words(vocab, tokens: list[int], language: str) -> tuple[list[str], list[list[int]]]:
    """Text tokens (and a final EOT) grouped into words: at spaces and punctuation, or per character for
    languages written without spaces; a token that ends mid-character joins the next."""
    pieces, piece_tokens = _split_on_unicode(vocab, tokens)
    if language in NO_SPACE_LANGUAGES:
        return pieces, piece_tokens
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for piece, toks in zip(pieces, piece_tokens, strict=True):
        special = toks[0] >= vocab.eot
        if special or piece.startswith(" ") or piece.strip() in string.punctuation or not words:
            words.append(piece)
            word_tokens.append(list(toks))
        else:
            words[-1] += piece
            word_tokens[-1].extend(toks)
    return words, word_tokens


def _split_on_unicode(vocab, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
    def text(ids: list[int]) -> str:
        """Decoded text; a special token (the final EOT) reads as a marker of its own."""
        out, run = [], []
        for i in ids:
            if i >= vocab.eot:
                out += [vocab.decode(run), "<|special|>"]
                run = []
            else:
                run.append(i)
        return "".join([*out, vocab.decode(run)])

    full = text(tokens)
    pieces, piece_tokens, current, offset = [], [], [], 0
    for token in tokens:
        current.append(token)
        decoded = text(current)
        bad = decoded.find("\ufffd")
        if bad < 0 or full[offset + bad : offset + bad + 1] == "\ufffd":
            pieces.append(decoded)
            piece_tokens.append(current)
            current = []
            offset += len(decoded)
    return pieces, piece_tokens


def find_alignment(
    qk: np.ndarray,
    token_probs: np.ndarray,
    vocab,
    text_tokens: list[int],
    frames: int,
    sot_len: int,
    language: str,
) -> list[WordTiming]:
    """qk (heads, tokens, 1500): the alignment heads' cross-attention scores over the sequence
    sot_sequence + <|notimestamps|> + text + EOT; token_probs (len(text),): each text token's probability.
    frames: the window's mel frames that hold audio."""
    if not text_tokens:
        return []
    weights = qk[:, :, : frames // 2].astype(np.float64)
    weights = np.exp(weights - weights.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)  # softmax over positions
    mean, std = weights.mean(axis=-2, keepdims=True), weights.std(axis=-2, keepdims=True)
    std[std == 0] = 1.0  # a position every token weighs alike (one-token texts) carries no timing
    weights = median_filter((weights - mean) / std, 7)
    matrix = weights.mean(axis=0)[sot_len:-1]  # (text tokens + 1, positions): from <|notimestamps|> on
    text_indices, time_indices = dtw(-matrix)
    words, word_tokens = split_words(vocab, [*text_tokens, vocab.eot], language)
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts, ends = jump_times[boundaries[:-1]], jump_times[boundaries[1:]]
    probs = [float(np.mean(token_probs[i:j])) for i, j in zip(boundaries[:-1], boundaries[1:], strict=True)]
    return [
        WordTiming(w, t, float(s), float(e), p)
        for w, t, s, e, p in zip(words, word_tokens, starts, ends, probs, strict=False)
    ]


def merge_punctuations(alignment: list[WordTiming]) -> None:
    """Opening marks join the next word, closing marks the previous one (in place)."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        previous, following = alignment[i], alignment[j]
        if previous.word.startswith(" ") and previous.word.strip() in PREPEND_PUNCTUATIONS:
            following.word, following.tokens = (
                previous.word + following.word,
                previous.tokens + following.tokens,
            )
            previous.word, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        previous, following = alignment[i], alignment[j]
        if not previous.word.endswith(" ") and following.word in APPEND_PUNCTUATIONS:
            previous.word, previous.tokens = (
                previous.word + following.word,
                previous.tokens + following.tokens,
            )
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1


def assign_words(
    segments: list[Segment], alignment: list[WordTiming], vocab, time_offset: float, last_speech: float
) -> float:
    """Give each segment its words (times from the window start + time_offset), with openai-whisper's
    clean-ups: overlong words near sentence marks shortened, a first word far after the previous speech
    clipped, segment bounds moved to their words. Returns the new end of speech."""
    durations = np.array([t.end - t.start for t in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations)) if len(durations) else 0.0)
    longest = median * 2
    if len(durations):
        marks = ".。!！?？"
        for i in range(1, len(alignment)):
            if alignment[i].end - alignment[i].start > longest:
                if alignment[i].word in marks:
                    alignment[i].end = alignment[i].start + longest
                elif alignment[i - 1].word in marks:
                    alignment[i].start = alignment[i].end - longest
    merge_punctuations(alignment)
    index = 0
    for segment in segments:
        text_tokens = [t for t in segment.tokens if t < vocab.eot]
        saved, words = 0, []
        while index < len(alignment) and saved < len(text_tokens):
            timing = alignment[index]
            if timing.word:
                start, end = round(time_offset + timing.start, 2), round(time_offset + timing.end, 2)
                words.append(Word(timing.word, start, end, timing.probability))
            saved += len(timing.tokens)
            index += 1
        if words:
            first = words[0]
            if first.end - last_speech > median * 4 and (
                first.end - first.start > longest
                or (len(words) > 1 and words[1].end - first.start > longest * 2)
            ):
                if len(words) > 1 and words[1].end - words[1].start > longest:
                    boundary = max(words[1].end / 2, words[1].end - longest)
                    first.end = words[1].start = boundary
                first.start = max(0, first.end - longest)
            if segment.start < first.end and segment.start - 0.5 > first.start:
                first.start = max(0, min(first.end - median, segment.start))
            else:
                segment.start = first.start
            last = words[-1]
            if segment.end > last.start and segment.end + 0.5 < last.end:
                last.end = max(last.start + median, segment.end)
            else:
                segment.end = last.end
            last_speech = segment.end
        segment.words = words
    return last_speech
