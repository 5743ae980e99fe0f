"""KokoroSynthesizer: a loaded Kokoro-82M and its voice packs, speech from text with them.

Kokoro comes as a directory in either of two forms:
  * Kokoro-82M's own: config.json (sizes and the phoneme vocab), the weights (kokoro-v1_0.pth as published, or
    SafeTensors), voice packs in voices/ (.pt or .safetensors; blazr/loaders/kokoro.py);
  * kokoro-onnx's int8 export: one .onnx (no .onnx.json beside it: that is a Piper voice), its voice packs in
    an .npz (voices-v1.0.bin is one too) and vocab.json (blazr/loaders/kokoro_onnx.py; the catalog's
    kokoro-ja is one).
Either way the voice packs of the model's voices/ and of the voice directory (--voice-dir, else
$BLAZR_VOICE_DIR; its packs win on a shared name) join them. A voice speaks the language its name's first
letter says (Kokoro's convention: af_heart American English, jf_alpha Japanese); text is read in that language
by blazr/tasks/kokoro_g2p.py, sentence by sentence, and each sentence becomes one pass of the network with the
pack's row for its length (KPipeline's pack[len(phonemes) - 1]).

The interface is the VITS Synthesizer's (blazr/tasks/speak.py), which the server, `blazr speak` and the
Python API use alike.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError, ConfigError, InputError
from blazr.tasks.kokoro_g2p import KokoroPhonemizer, language_of
from blazr.tasks.speak import MAX_SPEED, MIN_SPEED, OPENAI_VOICES, Speech, Voice, joined_speech

PREFERRED_DEFAULT = "af_heart"  # Kokoro's best-rated voice, the default when a model has it


def kokoro_onnx_file(path: Path) -> Path | None:
    """The .onnx of a kokoro-onnx directory (or the file itself): one .onnx with no .onnx.json beside it and
    an .npz / voices*.bin of voice packs; None when `path` is not one."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".onnx":
            return None
        directory, candidates = path.parent, [path]
    elif path.is_dir():
        directory, candidates = path, sorted(path.glob("*.onnx"))
    else:
        return None
    if len(candidates) != 1 or Path(f"{candidates[0]}.json").exists():
        return None
    return candidates[0] if _voice_files(directory) else None


def is_kokoro(path: Path | str) -> bool:
    from blazr.loaders.kokoro import is_kokoro_dir

    path = Path(path)
    return (path.is_dir() and is_kokoro_dir(path)) or kokoro_onnx_file(path) is not None


def _voice_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.npz")) + sorted(directory.glob("voices*.bin"))


def read_vocab(directory: Path, config: dict[str, Any]) -> dict[str, int]:
    """Phoneme -> id: config.json's "vocab" (Kokoro-82M's), else vocab.json ({"vocab": {...}} or the dict)."""
    vocab = config.get("vocab")
    if not vocab and (directory / "vocab.json").is_file():
        data = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
        vocab = data.get("vocab", data) if isinstance(data, dict) else None
    if not vocab:
        raise CheckpointError(f"{directory}: no phoneme vocab (config.json 'vocab' or vocab.json)")
    return {str(k): int(v) for k, v in vocab.items()}


class KokoroSynthesizer:
    """A loaded Kokoro model. `synthesize(text)` speaks a text; `stream(text)` yields it sentence by sentence."""

    task = "speak"

    def __init__(self, model, vocab: dict[str, int], packs: dict[str, Callable[[], np.ndarray]], path: Path):
        from blazr.backends.host_memory import keep_freed_host_memory
        from blazr.loaders import Checkpoint
        from blazr.models.kokoro import SAMPLE_RATE

        keep_freed_host_memory()  # the decoder's large arrays, made afresh for every sentence
        if not packs:
            raise CheckpointError(
                f"{path}: no Kokoro voice packs found (voices/*.pt or *.safetensors, or an .npz)"
            )
        self.model, self.vocab, self.path = model, vocab, path
        self.be = self.backend = model.be
        self.sample_rate = SAMPLE_RATE
        self._packs, self._loaded = packs, {}
        self.voices = [Voice(id=n, name=n, language=language_of(n).tag) for n in sorted(packs)]
        names = [v.id for v in self.voices]
        self.default_voice = PREFERRED_DEFAULT if PREFERRED_DEFAULT in names else names[0]
        self.phonemizer = KokoroPhonemizer(vocab, model.bert.positions - 2)  # ids add a 0 at each end
        fmt = "onnx" if path.suffix == ".onnx" else "safetensors"
        directory = path.parent if path.is_file() else path
        self.checkpoint = Checkpoint(path=path, format=fmt, config={}, tensors={}, directory=directory)

    @classmethod
    def load(
        cls, path: Path | str, device: Any = "cpu", voice_dir: Path | str | None = None
    ) -> KokoroSynthesizer:
        """Kokoro at `path` (a Kokoro-82M directory, or a kokoro-onnx directory or .onnx) on `device`."""
        from blazr.backends import get_backend
        from blazr.backends.base import check_supports
        from blazr.loaders.kokoro import load_kokoro
        from blazr.loaders.kokoro_onnx import load_kokoro_onnx

        path = Path(path)
        chosen = voice_dir if voice_dir is not None else os.environ.get("BLAZR_VOICE_DIR") or None
        if chosen is not None and not Path(chosen).is_dir():
            raise ConfigError(f"voice directory {chosen} (--voice-dir, BLAZR_VOICE_DIR) is not a directory")
        backend = get_backend(device) if isinstance(device, str) else device
        onnx = kokoro_onnx_file(path)
        directory = onnx.parent if onnx is not None else path
        config_file = directory / "config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        vocab = read_vocab(directory, config)
        model = load_kokoro_onnx(onnx, backend) if onnx is not None else load_kokoro(path, backend)
        check_supports(backend, model.required_ops())
        if max(vocab.values()) >= model.args.n_token:
            raise CheckpointError(
                f"{directory}: the phoneme vocab has ids past the model's {model.args.n_token}"
            )
        packs = voice_packs(directory, [directory / "voices", *([Path(chosen)] if chosen else [])])
        return cls(model, vocab, packs, onnx or path)

    # ---- text -------------------------------------------------------------------------------------------

    def voice(self, name: str | None) -> Voice:
        """The voice called `name`. None: the default; an OpenAI voice name: the Kokoro voice of that name
        (af_alloy for "alloy") when there is one, else the default. InputError lists the voices."""
        if name is None:
            name = self.default_voice
        elif name in OPENAI_VOICES:
            same = [v.id for v in self.voices if v.id.partition("_")[2] == name]
            name = same[0] if same else self.default_voice
        for v in self.voices:
            if name == v.id:
                return v
        known = ", ".join(v.id for v in self.voices)
        raise InputError(f"unknown voice {name!r}; this model's voices: {known}")

    def phonemize(self, text: str, voice: str | None = None) -> list[str]:
        """The text's sentences as the phonemes `voice` reads them (its language's reader)."""
        return self.phonemizer.phonemes(text, language_of(self.voice(voice).id))

    def ids(self, phonemes: str) -> np.ndarray:
        """Phonemes -> ids (T,): Kokoro's 0, each phoneme's id (phonemes the vocab lacks are skipped), 0."""
        return np.array([0, *(self.vocab[ch] for ch in phonemes if ch in self.vocab), 0], dtype=np.int32)

    def pack(self, name: str) -> np.ndarray:
        """The voice pack (N, 1, 2S), read once."""
        if name not in self._loaded:
            self._loaded[name] = self._packs[name]()
        return self._loaded[name]

    # ---- speech -----------------------------------------------------------------------------------------

    def stream(
        self, text: str, voice: str | None = None, speed: float = 1.0, seed: int | None = None
    ) -> Iterator[tuple[str, np.ndarray]]:
        """(phonemes, audio (N,) float32 in [-1, 1]) of each sentence in turn. seed: the harmonic source's
        noise made reproducible (the same seed, text and settings give the same samples); None: fresh."""
        from blazr.loaders.kokoro import style_for

        chosen = self.voice(voice)
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ConfigError(f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}")
        sentences = self.phonemize(text, chosen.id)
        if not sentences:
            raise InputError("the input has nothing to speak")
        pack, rng = self.pack(chosen.id), np.random.default_rng(seed)
        for phonemes in sentences:
            ids = self.ids(phonemes)
            audio = self.model.synthesize(ids, style_for(pack, len(ids) - 2), speed, noise=True, rng=rng)
            yield phonemes, np.clip(audio, -1.0, 1.0)

    def synthesize(
        self, text: str, voice: str | None = None, speed: float = 1.0, seed: int | None = None
    ) -> Speech:
        """The whole text as one Speech: its sentences back to back."""
        return joined_speech(self.stream(text, voice, speed, seed), self.sample_rate)


def voice_packs(model_dir: Path, voice_dirs: list[Path]) -> dict[str, Callable[[], np.ndarray]]:
    """Voice name -> a loader of its pack: the model directory's .npz packs, then each voice directory's
    packs (.safetensors or .pt) in turn (a later one wins on a shared name: --voice-dir over the model's voices/)."""
    from blazr.loaders.kokoro import list_voices, load_voice

    packs: dict[str, Callable[[], np.ndarray]] = {}
    for file in _voice_files(model_dir):
        with np.load(file) as data:
            names = list(data.files)
        for name in names:
            packs[name] = lambda file=file, name=name: _npz_pack(file, name)
    for folder in voice_dirs:
        if folder.is_dir():
            for name in list_voices(folder):
                packs[name] = lambda folder=folder, name=name: load_voice(folder, name)
    return packs


def _npz_pack(file: Path, name: str) -> np.ndarray:
    with np.load(file) as data:
        return np.asarray(data[name], dtype=np.float32)
