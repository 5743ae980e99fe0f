"""Text -> Kokoro's phonemes, with misaki, the G2P library Kokoro's own pipeline (the `kokoro` package's
KPipeline) runs, language by language as KPipeline picks it:

  * Japanese (voices j*): misaki.ja.JAG2P, its default reader (cutlet's romanizer over fugashi's tokens, here
    with the unidic-lite dictionary, which pip installs whole; KPipeline's `unidic` downloads the full UniDic
    separately);
  * Mandarin (z*): misaki.zh.ZHG2P, version None as for Kokoro-82M v1.0 (jieba, pypinyin, cn2an);
  * Spanish, French, Hindi, Italian, Brazilian Portuguese (e*, f*, h*, i*, p*): misaki.espeak.EspeakG2P,
    espeak-ng's phonemes mapped onto Kokoro's symbols;
  * English (a* American, b* British): KPipeline reads English with misaki.en's lexicon, which needs spaCy's
    en_core_web_sm model, a package that is not on the package index (spaCy downloads it from elsewhere).
    blazr reads English with espeak-ng through misaki's own espeak -> Kokoro mapping (misaki.espeak.
    EspeakFallback, KPipeline's reader for words its lexicon lacks), which is how kokoro-onnx read English.

The libraries are an install extra (`pip install 'blazr[kokoro]'`: Japanese's dictionaries alone are
~600 MB); a language whose reader is missing is a clear error naming what to install.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from blazr.errors import InputError, UnsupportedError

EXTRA = "pip install 'blazr[kokoro]'"


@dataclass(frozen=True)
class Language:
    code: str  # Kokoro's language code: a voice name's first letter ("jf_alpha" -> "j")
    tag: str  # BCP 47-ish tag the voices list shows ("ja", "en-us")
    name: str


LANGUAGES = {
    lang.code: lang
    for lang in (
        Language("a", "en-us", "American English"),
        Language("b", "en-gb", "British English"),
        Language("e", "es", "Spanish"),
        Language("f", "fr-fr", "French"),
        Language("h", "hi", "Hindi"),
        Language("i", "it", "Italian"),
        Language("p", "pt-br", "Brazilian Portuguese"),
        Language("j", "ja", "Japanese"),
        Language("z", "zh", "Mandarin Chinese"),
    )
}
DEFAULT_LANGUAGE = "a"  # a voice whose name carries no code (not one of Kokoro's): KPipeline's default

# Where a sentence ends: after . ! ? ; : and a space, after the CJK full-width marks at once, at line breaks
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[\u3002\uff01\uff1f\uff1b])|\n+")
_BREAKS = " ,.!?;:—…"  # where an over-long sentence's phonemes may be cut, best first from the end


def language_of(voice: str) -> Language:
    """The language a Kokoro voice speaks, from its name's first letter (af_heart: American English)."""
    code = voice[:1].lower()
    if len(voice) > 2 and voice[2] == "_" and code in LANGUAGES:
        return LANGUAGES[code]
    return LANGUAGES[DEFAULT_LANGUAGE]


def split_sentences(text: str) -> list[str]:
    """The text's sentences, stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def reader(language: Language) -> Callable[[str], str]:
    """A function text -> phonemes for the language (made once per language: the readers load dictionaries)."""
    code = language.code
    try:
        if code == "j":
            # misaki.ja imports pyopenjtalk, which prints a notice about onnxruntime to stdout
            with contextlib.redirect_stdout(io.StringIO()):
                from misaki import ja

            g2p = ja.JAG2P()
            return lambda text: g2p(text)[0]
        if code == "z":
            from misaki import zh

            logging.getLogger("jieba").setLevel(logging.WARNING)  # not its dictionary-loading notes on stderr
            g2p_zh = zh.ZHG2P()
            return lambda text: g2p_zh(text)[0]
        from misaki import espeak

        if code in "ab":
            english = espeak.EspeakFallback(british=code == "b")
            return lambda text: english(SimpleNamespace(text=text))[0] or ""
        g2p_espeak = espeak.EspeakG2P(language=language.tag)
        return lambda text: g2p_espeak(text)[0]
    except ImportError as e:
        # the single-file archive leaves misaki out (packaging/build.py)
        if getattr(sys, "frozen", False):
            raise UnsupportedError(
                f"reading {language.name} for Kokoro needs misaki, which the single-file archive leaves out; "
                f"install blazr with pip instead: {EXTRA}"
            ) from None
        raise UnsupportedError(
            f"reading {language.name} for Kokoro needs misaki's reader ({e.name or e} is not installed): {EXTRA}"
        ) from None


class KokoroPhonemizer:
    """Sentences -> phoneme strings Kokoro reads, each within the model's context (`limit` phonemes)."""

    def __init__(self, vocab: dict[str, int], limit: int):
        self.vocab, self.limit = vocab, limit
        self._readers: dict[str, Callable[[str], str]] = {}

    def phonemes(self, text: str, language: Language) -> list[str]:
        """The text's sentences as phonemes Kokoro knows (others dropped, as KPipeline drops them), a sentence
        longer than the context cut at its last word or punctuation break that fits."""
        if language.code not in self._readers:
            self._readers[language.code] = reader(language)
        read = self._readers[language.code]
        out: list[str] = []
        for sentence in split_sentences(text):
            try:
                phonemes = read(sentence)
            except Exception as e:  # the reader's own failure on this text: the client's input, a 400
                raise InputError(f"the {language.name} reader could not read {sentence!r} ({e})") from None
            known = "".join(ch for ch in phonemes if ch in self.vocab).strip()
            out += [piece for piece in cut(known, self.limit) if piece.strip()]
        return out


def cut(phonemes: str, limit: int) -> list[str]:
    """phonemes in pieces of at most `limit`, each cut after the last break (space, punctuation) that fits;
    a stretch without one is cut at the limit."""
    pieces: list[str] = []
    rest = phonemes
    while len(rest) > limit:
        at = max(rest.rfind(ch, 0, limit) for ch in _BREAKS)
        at = limit if at <= 0 else at + 1
        pieces.append(rest[:at].strip())
        rest = rest[at:].strip()
    return [*pieces, rest] if rest else pieces
