"""Whisper's token layout: the special tokens every Whisper vocabulary keeps at the same place relative to its
size, the languages, the timestamp tokens, and text <-> ids through the model's tokenizer.json.

openai-whisper derives the layout from the vocabulary size (51864: English-only; 51865: 99 languages;
51866: 100 languages since large-v3): <|endoftext|>, <|startoftranscript|>, one token per language, then
<|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|> and the 1501
timestamp tokens <|0.00|> ... <|30.00|>. Tokenizer files differ in which of these they name (the CTranslate2
export's stops at <|notimestamps|>), so the ids come from the size, as openai-whisper computes them.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from blazr.errors import InputError, TokenizerError

# openai-whisper's languages in token order: (ISO 639-1 code, the name OpenAI's API returns)
LANGUAGES: tuple[tuple[str, str], ...] = (
    ("en", "english"),
    ("zh", "chinese"),
    ("de", "german"),
    ("es", "spanish"),
    ("ru", "russian"),
    ("ko", "korean"),
    ("fr", "french"),
    ("ja", "japanese"),
    ("pt", "portuguese"),
    ("tr", "turkish"),
    ("pl", "polish"),
    ("ca", "catalan"),
    ("nl", "dutch"),
    ("ar", "arabic"),
    ("sv", "swedish"),
    ("it", "italian"),
    ("id", "indonesian"),
    ("hi", "hindi"),
    ("fi", "finnish"),
    ("vi", "vietnamese"),
    ("he", "hebrew"),
    ("uk", "ukrainian"),
    ("el", "greek"),
    ("ms", "malay"),
    ("cs", "czech"),
    ("ro", "romanian"),
    ("da", "danish"),
    ("hu", "hungarian"),
    ("ta", "tamil"),
    ("no", "norwegian"),
    ("th", "thai"),
    ("ur", "urdu"),
    ("hr", "croatian"),
    ("bg", "bulgarian"),
    ("lt", "lithuanian"),
    ("la", "latin"),
    ("mi", "maori"),
    ("ml", "malayalam"),
    ("cy", "welsh"),
    ("sk", "slovak"),
    ("te", "telugu"),
    ("fa", "persian"),
    ("lv", "latvian"),
    ("bn", "bengali"),
    ("sr", "serbian"),
    ("az", "azerbaijani"),
    ("sl", "slovenian"),
    ("kn", "kannada"),
    ("et", "estonian"),
    ("mk", "macedonian"),
    ("br", "breton"),
    ("eu", "basque"),
    ("is", "icelandic"),
    ("hy", "armenian"),
    ("ne", "nepali"),
    ("mn", "mongolian"),
    ("bs", "bosnian"),
    ("kk", "kazakh"),
    ("sq", "albanian"),
    ("sw", "swahili"),
    ("gl", "galician"),
    ("mr", "marathi"),
    ("pa", "punjabi"),
    ("si", "sinhala"),
    ("km", "khmer"),
    ("sn", "shona"),
    ("yo", "yoruba"),
    ("so", "somali"),
    ("af", "afrikaans"),
    ("oc", "occitan"),
    ("ka", "georgian"),
    ("be", "belarusian"),
    ("tg", "tajik"),
    ("sd", "sindhi"),
    ("gu", "gujarati"),
    ("am", "amharic"),
    ("yi", "yiddish"),
    ("lo", "lao"),
    ("uz", "uzbek"),
    ("fo", "faroese"),
    ("ht", "haitian creole"),
    ("ps", "pashto"),
    ("tk", "turkmen"),
    ("nn", "nynorsk"),
    ("mt", "maltese"),
    ("sa", "sanskrit"),
    ("lb", "luxembourgish"),
    ("my", "myanmar"),
    ("bo", "tibetan"),
    ("tl", "tagalog"),
    ("mg", "malagasy"),
    ("as", "assamese"),
    ("tt", "tatar"),
    ("haw", "hawaiian"),
    ("ln", "lingala"),
    ("ha", "hausa"),
    ("ba", "bashkir"),
    ("jw", "javanese"),
    ("su", "sundanese"),
    ("yue", "cantonese"),
)
# a code, a name or one of openai-whisper's other names -> the code ("English", "mandarin" -> "en", "zh")
LANGUAGE_CODES = (
    {name: code for code, name in LANGUAGES}
    | {code: code for code, _ in LANGUAGES}
    | {
        "burmese": "my",
        "valencian": "ca",
        "flemish": "nl",
        "haitian": "ht",
        "letzeburgesch": "lb",
        "pushto": "ps",
        "panjabi": "pa",
        "moldavian": "ro",
        "moldovan": "ro",
        "sinhalese": "si",
        "castilian": "es",
        "mandarin": "zh",
    }
)


def language_code(value: str) -> str | None:
    """An ISO code ("en") or a name ("English") -> the code; None when Whisper has no such language."""
    return LANGUAGE_CODES.get(value.strip().lower())


def language_name(code: str) -> str:
    """ "en" -> "english", as OpenAI's verbose_json spells it; an unknown code is returned as it is."""
    return dict(LANGUAGES).get(code, code)


TIME_PRECISION = 0.02  # seconds per timestamp token step


class WhisperVocabulary:
    """Special token ids for a Whisper vocabulary of `vocab_size`, and text through `tokenizer` (a
    tokenizers.Tokenizer, or None: ids only, as for a checkpoint without tokenizer.json)."""

    def __init__(self, vocab_size: int, tokenizer=None):
        self.vocab_size, self.tokenizer = vocab_size, tokenizer
        self.multilingual = vocab_size >= 51865
        self.num_languages = vocab_size - 51765 - int(self.multilingual)
        self.eot = 50257 if self.multilingual else 50256
        self.sot = self.eot + 1
        self.translate = self.sot + 1 + self.num_languages
        self.transcribe = self.translate + 1
        self.sot_lm, self.sot_prev, self.no_speech = (
            self.transcribe + 1,
            self.transcribe + 2,
            self.transcribe + 3,
        )
        self.no_timestamps = self.transcribe + 4
        self.timestamp_begin = self.no_timestamps + 1

    @classmethod
    def from_directory(cls, vocab_size: int, directory: Path | None) -> WhisperVocabulary:
        path = None if directory is None else Path(directory) / "tokenizer.json"
        if path is None or not path.is_file():
            return cls(vocab_size)
        from tokenizers import Tokenizer

        try:
            return cls(vocab_size, Tokenizer.from_file(str(path)))
        except Exception as e:  # the tokenizers library raises its own exception types
            raise TokenizerError(f"{path}: not a tokenizer.json the tokenizers library reads ({e})") from None

    # ---- languages -----------------------------------------------------------------------------------

    @property
    def languages(self) -> tuple[str, ...]:
        """The language codes this model knows (just "en" for an English-only model)."""
        return tuple(code for code, _ in LANGUAGES[: self.num_languages]) if self.multilingual else ("en",)

    def language_code(self, language: str) -> str:
        """ "en", "English" or "english" -> "en"; InputError (param "language") for one the model lacks."""
        code = language_code(language)
        if code is None or code not in self.languages:
            known = "only English" if not self.multilingual else f"{len(self.languages)} languages"
            raise InputError(f"language {language!r} is not one this model knows ({known})", param="language")
        return code

    def language_token(self, code: str) -> int:
        return self.sot + 1 + self.languages.index(code)

    @cached_property
    def language_tokens(self) -> tuple[int, ...]:
        return tuple(self.sot + 1 + i for i in range(len(self.languages))) if self.multilingual else ()

    # ---- prompts -------------------------------------------------------------------------------------

    def sot_sequence(self, language: str | None, task: str) -> list[int]:
        """<|startoftranscript|> [<|lang|> <|task|>]: English-only models take neither."""
        if not self.multilingual:
            return [self.sot]
        return [
            self.sot,
            self.language_token(language or "en"),
            self.translate if task == "translate" else self.transcribe,
        ]

    # ---- text ----------------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise TokenizerError("this Whisper checkpoint has no tokenizer.json: text prompts need one")
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """Text of the text tokens among `ids` (special and timestamp tokens dropped)."""
        text_ids = [int(i) for i in ids if int(i) < self.eot]
        if self.tokenizer is None:
            return "".join(f"<{i}>" for i in text_ids)
        return self.tokenizer.decode(text_ids, skip_special_tokens=False)

    def decode_with_timestamps(self, ids) -> str:
        """Text with <|1.08|> marks where the timestamp tokens are (for logs and tests)."""
        parts, run = [], []
        for i in ids:
            if i >= self.timestamp_begin:
                parts.append(self.decode(run))
                parts.append(f"<|{(i - self.timestamp_begin) * TIME_PRECISION:.2f}|>")
                run = []
            else:
                run.append(i)
        return "".join([*parts, self.decode(run)])

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        """openai-whisper's suppress_tokens="-1": tokens of speaker tags and symbols that are not speech
        ("♪", "[", "(" ...), keeping plain punctuation; the first token of a multi-token symbol."""
        if self.tokenizer is None:
            return ()
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        miscellaneous = set("♩♪♫♬♭♮♯")  # U+2640..U+267F: their first two UTF-8 bytes are shared
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + sorted(miscellaneous):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in miscellaneous:
                    result.add(tokens[0])
        return tuple(sorted(result))
