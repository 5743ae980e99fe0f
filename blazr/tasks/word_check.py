"""Did the listener hear what the script says? Word-by-word comparison of a phrase and its transcript.

Both sides go through one small normaliser, so spelling choices the ear cannot hear do not count:

* lowercase; "-", "/", "_" and whitespace separate words ("forty-two" -> "forty two"); apostrophes join
  ("it's" -> "its", "o'clock" -> "oclock"); every other punctuation mark is dropped;
* numbers in digits are spelled out, since a voice reads them and Whisper writes them as digits:
  "42" -> "forty two", "1,500" -> "one thousand five hundred", "3.5" -> "three point five", "7:15" ->
  "seven fifteen", "7:05" -> "seven oh five", "2:00" -> "two oclock", "5th" -> "fifth", "50%" -> "fifty
  percent", "$8" -> "eight dollars"; "and" inside a spelled number is dropped ("one hundred and five" ->
  "one hundred five") and "a hundred" is "one hundred";
* "&" is "and", "ok" is "okay", and the titles "Dr.", "Mr.", "Mrs." are "doctor", "mister", "missus";
* two neighbouring words that make a word of the other side are joined ("voice over" = "voiceover").

The two word lists are then aligned with difflib; each stretch that differs is one Difference (words the
script has that were not heard, words heard that it lacks, or both), and the word error rate is the edits over
the script's word count. The rules are deliberately few: what they miss costs a reroll or an "ok ?" mark,
never a wrong "ok".
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth"}
_ORDINALS |= {"nine": "ninth", "twelve": "twelfth"}
_WORDS = {"dr": "doctor", "mr": "mister", "mrs": "missus", "ok": "okay"}
_NUMBER_WORDS = frozenset(_ONES[1:] + _TENS[2:] + ["hundred"] + [name for _, name in _SCALES])
_NUMBER = re.compile(
    r"(?P<dollar>\$)?(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:(?P<sep>[:.])(?P<frac>\d+))?"
    r"(?P<ordinal>st|nd|rd|th)?\b(?P<percent>%)?"
)


def spell_number(n: int) -> str:
    """0 <= n < 10**15 in words, without "and": 1500 -> "one thousand five hundred"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + spell_number(rest))
    for size, name in _SCALES:
        if n >= size:
            rest = n % size
            return spell_number(n // size) + " " + name + ("" if rest == 0 else " " + spell_number(rest))
    raise ValueError(n)


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
    whole, sep, frac = match.group("whole", "sep", "frac")
    digits = whole.replace(",", "")
    if len(digits) > 15:  # a serial number, not an amount: read digit by digit
        return " " + " ".join(_ONES[int(d)] for d in digits) + " "
    words = spell_number(int(digits))
    if sep == ":":  # a clock time: "7:15" seven fifteen, "7:05" seven oh five, "2:00" two o'clock
        if int(frac) == 0:
            words += " oclock"
        else:
            words += (" oh " if frac.startswith("0") else " ") + spell_number(int(frac))
    elif sep == ".":  # a decimal: "3.14" three point one four
        words += " point " + " ".join(_ONES[int(d)] for d in frac)
    if match.group("ordinal"):
        words = _ordinal(words)
    if match.group("percent"):
        words += " percent"
    if match.group("dollar"):
        words += " dollars"
    return f" {words} "


def normalize(text: str) -> list[str]:
    """The words of `text` after the rules in this module's docstring."""
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("&", " and ")
    text = _NUMBER.sub(_spell, text)
    text = text.replace("'", "")
    text = re.sub(r"[^\w\s]|_", " ", text)
    words = [_WORDS.get(w, w) for w in text.split()]
    out: list[str] = []
    for i, w in enumerate(words):
        after = words[i + 1] if i + 1 < len(words) else ""
        if w == "and" and out and out[-1] in _NUMBER_WORDS and after in _NUMBER_WORDS:
            continue  # "one hundred and five" is "105" heard
        if w == "a" and after in ("hundred", "thousand", "million", "billion"):
            w = "one"
        out.append(w)
    return out


@dataclass(frozen=True)
class Difference:
    """One stretch where the two sides differ: `expected` words of the script (empty: extra words were heard)
    and the `heard` words in their place (empty: the script's words were not heard)."""

    expected: str
    heard: str

    def __str__(self) -> str:
        if not self.heard:
            return f"missing {self.expected!r}"
        if not self.expected:
            return f"extra {self.heard!r}"
        return f"{self.expected!r} heard as {self.heard!r}"

    def to_dict(self) -> dict[str, str]:
        return {"expected": self.expected, "heard": self.heard}


@dataclass(frozen=True)
class WordCheck:
    """A phrase compared with what was heard."""

    expected: list[str]  # the normalised words of the phrase
    heard: list[str]  # the normalised words heard
    errors: int  # substitutions + deletions + insertions along the alignment
    differences: list[Difference] = field(default_factory=list)

    @property
    def wer(self) -> float:
        """Word error rate: errors over the phrase's words (1.0 when it has none and something was heard)."""
        if not self.expected:
            return 0.0 if not self.heard else 1.0
        return self.errors / len(self.expected)

    @property
    def exact(self) -> bool:
        return self.errors == 0


def join_compounds(words: list[str], other: list[str]) -> list[str]:
    """`words` with each pair of neighbours joined where the joined word is one of `other`'s: "voice over"
    heard for "voiceover", or "away" heard for "a way", is the same sound spelled another way."""
    known, out, i = set(other), [], 0
    while i < len(words):
        if i + 1 < len(words) and words[i] + words[i + 1] in known and words[i] not in known:
            out.append(words[i] + words[i + 1])
            i += 2
        else:
            out.append(words[i])
            i += 1
    return out


def compare(expected: str, heard: str) -> WordCheck:
    """Align the normalised words of `expected` and `heard` and list the stretches that differ."""
    ref, hyp = normalize(expected), normalize(heard)
    ref, hyp = join_compounds(ref, hyp), join_compounds(hyp, ref)
    matcher = difflib.SequenceMatcher(None, ref, hyp, autojunk=False)
    errors, differences = 0, []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        errors += max(i2 - i1, j2 - j1)  # a replace of unequal lengths: substitutions, then the surplus
        differences.append(Difference(" ".join(ref[i1:i2]), " ".join(hyp[j1:j2])))
    return WordCheck(ref, hyp, errors, differences)
