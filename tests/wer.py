"""Word error rate for the speech tests, with no dependency beyond the standard library.

Both sides go through the same small normaliser before a word-level Levenshtein alignment:

* lowercase; "-", "/" and whitespace separate words; apostrophes join ("o'clock" -> "oclock", "it's" ->
  "its"); every other punctuation mark is dropped;
* numbers are spelled out the way tests/data/speech/sentences.txt writes them, since the reference speaks
  numbers and Whisper writes digits: "24" -> "twenty four", "100" -> "one hundred", "1,500" -> "one
  thousand five hundred", "7:15" or "7.15" -> "seven fifteen" (a clock time or price read as two numbers),
  "2:00" -> "two oclock", "7:05" -> "seven oh five", "$800" -> "eight hundred dollars", "50%" -> "fifty
  percent", "5th" -> "fifth";
* a few title abbreviations are expanded ("Dr." -> "doctor", "Mr." -> "mister", "Mrs." -> "missus").

This is deliberately far smaller than openai-whisper's EnglishTextNormalizer: it covers what a clean, read
set of sentences needs, and both the runtime under test and its reference are scored by the same rules, so a
rule it lacks costs both the same.
"""

from __future__ import annotations

import re

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen \
seventeen eighteen nineteen".split()
)
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_TITLES = {"dr": "doctor", "mr": "mister", "mrs": "missus"}


def spell_number(n: int) -> str:
    """0 <= n < 10**12 in words, without "and": 1500 -> "one thousand five hundred"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + spell_number(rest))
    for size, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= size:
            rest = n % size
            return spell_number(n // size) + " " + name + ("" if rest == 0 else " " + spell_number(rest))
    raise AssertionError(n)


def _ordinal(words: str) -> str:
    *head, last = words.split()
    if last in _ORDINALS:
        last = _ORDINALS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return " ".join([*head, last])


def _spell(match: re.Match) -> str:
    dollar, whole, frac, ordinal, percent = match.group("dollar", "whole", "frac", "ordinal", "percent")
    words = spell_number(int(whole.replace(",", "")))
    if frac is not None:  # "7:15", "7.50": read as two numbers; ":00" is "o'clock", "7:05" "seven oh five"
        if frac == "00":
            words += " oclock"
        else:
            words += (" oh " if frac.startswith("0") else " ") + spell_number(int(frac))
    if ordinal:
        words = _ordinal(words)
    if percent:
        words += " percent"
    if dollar:
        words += " dollars"
    return f" {words} "


_NUMBER = re.compile(
    r"(?P<dollar>\$)?(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:[:.](?P<frac>\d+))?(?P<ordinal>st|nd|rd|th)?\b"
    r"(?P<percent>%)?"
)


def normalize(text: str) -> list[str]:
    """The words of `text` after the rules in this module's docstring."""
    text = text.lower().replace("\u2019", "'")
    text = _NUMBER.sub(_spell, text)
    text = text.replace("'", "")
    text = re.sub(r"[^\w\s]", " ", text)
    return [_TITLES.get(w, w) for w in text.split()]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance: substitutions + deletions + insertions."""
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(errors, reference words) after normalising both."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    return edit_distance(ref, hyp), len(ref)


def wer(references: list[str], hypotheses: list[str]) -> float:
    """Corpus word error rate: all errors over all reference words (not a mean of per-sentence rates)."""
    pairs = [word_errors(r, h) for r, h in zip(references, hypotheses, strict=True)]
    return sum(e for e, _ in pairs) / sum(n for _, n in pairs)


def align(ref: list[str], hyp: list[str]) -> list[int | None]:
    """The longest common subsequence of two word lists, as: for each reference word, the index of the
    hypothesis word it is paired with, or None. The paired indices increase, so this finds the most reference
    words a hypothesis holds in the reference's order."""
    rows, cols = len(ref) + 1, len(hyp) + 1
    common = [[0] * cols for _ in range(rows)]  # common[i][j]: LCS length of ref[i:] and hyp[j:]
    for i in range(len(ref) - 1, -1, -1):
        for j in range(len(hyp) - 1, -1, -1):
            if ref[i] == hyp[j]:
                common[i][j] = common[i + 1][j + 1] + 1
            else:
                common[i][j] = max(common[i + 1][j], common[i][j + 1])
    matched: list[int | None] = [None] * len(ref)
    i = j = 0
    while i < len(ref) and j < len(hyp):
        if ref[i] == hyp[j]:
            matched[i] = j
            i, j = i + 1, j + 1
        elif common[i + 1][j] >= common[i][j + 1]:
            i += 1
        else:
            j += 1
    return matched
