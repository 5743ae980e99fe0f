"""Text -> ids for Hugging Face VitsModel voices (MMS-TTS): transformers' VitsTokenizer, for characters.

MMS-TTS voices read characters, not phonemes: vocab.json maps each character to an id. As VitsTokenizer
does (tokenizer_config.json's options): with `normalize`, the text is lowercased (vocabulary entries
that match as written are kept as written), characters outside the vocabulary are dropped and the ends
stripped; without it, an unknown character is the `<unk>` id. With `add_blank`, the id-0 token is put
before, between and after the characters. Checkpoints that phonemize (`phonemize`, an espeak reading
through the `phonemizer` package) or romanize (`is_uroman`, for non-Latin text) are refused: blazr has
neither reading in transformers' form.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from blazr.errors import CheckpointError, InputError, UnsupportedError

_NON_ROMAN = re.compile(r"[^\x00-\x7F]")


class CharTokenizer:
    def __init__(self, vocab: dict[str, int], options: dict):
        self.vocab = vocab
        self.add_blank = bool(options.get("add_blank", True))
        self.normalize = bool(options.get("normalize", True))
        self.language = options.get("language")
        self.is_uroman = bool(options.get("is_uroman", False))
        self.unk = vocab.get(str(options.get("unk_token", "<unk>")))
        if options.get("phonemize", False):
            raise UnsupportedError(
                "this voice's tokenizer phonemizes its text (phonemize: true), which blazr does not do"
            )

    @classmethod
    def from_dir(cls, directory: str | Path) -> CharTokenizer:
        directory = Path(directory)
        try:
            vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(f"{directory}: vocab.json (the voice's characters) is missing") from None
        except ValueError as e:
            raise CheckpointError(f"{directory}/vocab.json: not valid JSON ({e})") from None
        config_path = directory / "tokenizer_config.json"
        options = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        return cls({str(k): int(v) for k, v in vocab.items()}, options)

    def _lowercase(self, text: str) -> str:
        """Lowercase, leaving vocabulary entries found as written (VitsTokenizer.normalize_text)."""
        out, i = [], 0
        while i < len(text):
            word = next((w for w in self.vocab if text.startswith(w, i)), None)
            if word is not None:
                out.append(word)
                i += len(word)
            else:
                out.append(text[i].lower())
                i += 1
        return "".join(out)

    def prepare(self, text: str) -> str:
        """The text as the characters the voice reads."""
        if self.normalize:
            text = self._lowercase(text)
        if self.language == "ron":
            text = text.replace("ț", "ţ")
        if self.is_uroman and _NON_ROMAN.search(text):
            raise UnsupportedError("this voice reads romanized text (uroman), which blazr does not produce")
        if self.normalize:
            text = "".join(ch for ch in text if ch in self.vocab).strip()
        return text

    def ids(self, text: str) -> np.ndarray:
        """Text -> ids (T,) int32 (empty when nothing in the text is speakable)."""
        chars = self.prepare(text)
        if not chars:
            return np.zeros(0, dtype=np.int32)
        ids = [self.vocab.get(ch, self.unk) for ch in chars]
        if any(i is None for i in ids):
            raise InputError("the text has characters this voice lacks, and its vocabulary has no <unk>")
        if self.add_blank:
            blanked = [0] * (2 * len(ids) + 1)
            blanked[1::2] = ids
            ids = blanked
        return np.array(ids, dtype=np.int32)
