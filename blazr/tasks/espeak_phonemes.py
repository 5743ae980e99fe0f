"""Text -> IPA phonemes per sentence with espeak-ng, the way Piper voices were trained to read them.

espeak-ng itself comes from the `espeakng-loader` wheel (the library and its data, for Linux, macOS and
Windows), called through ctypes. Piper's own binding (piper-phonemize) has wheels for few platforms and
Pythons, and uses a patched espeak-ng that also reports each clause's terminator; here that terminator is
read from the text espeak consumed for the clause instead. As Piper does: numbers, abbreviations and
symbols are read by espeak's rules; a clause ending in `.`, `?` or `!` ends a sentence; `,` `:` `;` are kept
(each followed by a space) and the sentence-final mark too; phonemes are NFD-decomposed (`ç` -> `c` + U+0327).
espeak-ng keeps global state, so one lock serialises every call.
"""

from __future__ import annotations

import ctypes
import re
import threading
import unicodedata
from functools import cache

from blazr.errors import UnsupportedError

AUDIO_OUTPUT_SYNCHRONOUS = 0x02
CHARS_UTF8 = 1
PHONEMES_IPA = 0x02
_SENTENCE_END = {".": ".", "?": "?", "!": "!"}
_CLAUSE_MARK = {",": ", ", ":": ": ", ";": "; ", "\u2014": "; ", "\u2013": "; "}  # dashes as espeak: ";"
_LANGUAGE_FLAG = re.compile(r"\([a-z\-]+\)")  # espeak's "(en)" language-switch marks, dropped as Piper does

_lock = threading.Lock()


@cache
def _library() -> ctypes.CDLL:
    try:
        import espeakng_loader
    except ImportError:
        raise UnsupportedError(
            "text to phonemes needs espeak-ng: pip install espeakng-loader (a dependency of blazr)"
        ) from None
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
    data = espeakng_loader.get_data_path().encode()
    if lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, data, 0) < 0:
        raise UnsupportedError(f"espeak-ng did not initialise with its data at {data.decode()}")
    return lib


@cache
def _voice_ok(voice: str) -> bool:
    return _library().espeak_SetVoiceByName(voice.encode()) == 0


def phonemize(text: str, voice: str) -> list[str]:
    """IPA phoneme strings, one per sentence, of `text` read by espeak-ng's `voice` (e.g. "en-us")."""
    lib = _library()
    encoded = text.encode("utf-8")
    sentences: list[str] = []
    current = ""
    with _lock:
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise UnsupportedError(f"espeak-ng has no voice {voice!r}")
        for phonemes, clause in _clauses(lib, encoded):
            current += unicodedata.normalize("NFD", _LANGUAGE_FLAG.sub("", phonemes).strip())
            mark = _terminator(clause)
            if mark in _SENTENCE_END:
                sentences.append(current + mark)
                current = ""
            elif mark in _CLAUSE_MARK:
                current += _CLAUSE_MARK[mark]
            elif current and not current.endswith(" "):
                current += " "
    if current.strip():
        sentences.append(current.rstrip())
    return [s for s in sentences if s.strip(" .?!,:;")]


def _clauses(lib: ctypes.CDLL, encoded: bytes) -> list[tuple[str, str]]:
    """(phonemes, clause text) for each clause espeak reads. espeak stops one character past a clause (the
    next clause's first, after the whitespace), so that character moves back to the next clause's text."""
    buffer = ctypes.create_string_buffer(encoded)
    start = ctypes.addressof(buffer)
    end = start + len(encoded)
    pointer = ctypes.c_void_p(start)
    out: list[tuple[str, str]] = []
    carried = ""
    while pointer.value is not None and pointer.value < end:
        before = pointer.value
        phonemes = lib.espeak_TextToPhonemes(ctypes.byref(pointer), CHARS_UTF8, PHONEMES_IPA) or b""
        final = pointer.value is None or pointer.value >= end
        segment = encoded[before - start : (end if final else pointer.value) - start].decode(
            "utf-8", "replace"
        )
        own, read_ahead = (segment, "") if final else (segment[:-1], segment[-1:])
        out.append((phonemes.decode("utf-8"), carried + own))
        carried = read_ahead
    return out


def _terminator(clause: str) -> str:
    """The clause's final mark as Piper keeps it: "." "?" "!" end a sentence, "," ":" ";" a clause; an
    ellipsis or anything else: ""."""
    tail = clause.rstrip().rstrip("\"')]}\u201d\u2019").rstrip()
    run = re.search(r"[.?!,:;\u2014\u2013]+$", tail)
    if run is None:
        return ""
    marks = run.group()
    if len(marks) > 1 and set(marks) == {"."}:
        return ""  # "..."
    return "?" if "?" in marks else "!" if "!" in marks else marks[0]
