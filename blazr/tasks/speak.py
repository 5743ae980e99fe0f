"""Synthesizer: a loaded text-to-speech voice, and speech from text with it.

Piper voices: text is split into sentences and read as phonemes by espeak-ng (blazr.tasks.espeak_phonemes),
each sentence becomes the voice's phoneme ids (Piper's layout: BOS, each phoneme followed by the pad id,
EOS). Hugging Face VitsModel voices (MMS-TTS, blazr.loaders.vits_hf) read characters instead: sentences
split at their ending punctuation become ids as transformers' VitsTokenizer makes them
(blazr.tasks.vits_chars). Either way the VITS network (blazr.models.vits) turns the ids into audio, sentence
by sentence. As Piper does, each sentence
is scaled so its peak is full scale, so streamed and whole answers hold the same samples.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import ConfigError, InputError

# OpenAI's voice names: a client that sends one gets a voice's default speaker (OpenAI clients always send one)
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "fable",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
)
MIN_SPEED, MAX_SPEED = 0.25, 4.0
_SENTENCE_END = re.compile(r"(?<=[.!?;:\u3002\uff01\uff1f])\s+|\n+")  # character voices' sentence breaks


def is_voice(path: str | Path) -> bool:
    """Whether `path` is a voice Synthesizer.load reads: a Piper voice, a Hugging Face VitsModel directory or a
    Kokoro model (blazr/tasks/speak_kokoro.py)."""
    from blazr.loaders.piper import is_piper_voice
    from blazr.loaders.vits_hf import is_hf_vits
    from blazr.tasks.speak_kokoro import is_kokoro

    return is_piper_voice(path) or is_hf_vits(path) or is_kokoro(path)


@dataclass(frozen=True)
class Voice:
    id: str
    name: str
    language: str


@dataclass
class SpokenSentence:
    text: str  # the sentence's phonemes (espeak reads the text; the text of a sentence is not kept apart)
    start: float  # seconds into the audio
    end: float


@dataclass
class Speech:
    audio: np.ndarray  # (N,) float32 in [-1, 1]
    sample_rate: int
    sentences: list[SpokenSentence] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


class Synthesizer:
    """A loaded voice. `synthesize(text)` speaks a text; `stream(text)` yields it sentence by sentence."""

    task = "speak"

    def __init__(self, model, config: dict[str, Any], path: Path, tokenizer=None):
        """config: a Piper voice's .onnx.json, or (with `tokenizer`, a vits_chars.CharTokenizer) the
        config.json of a Hugging Face VitsModel directory."""
        from blazr.backends.host_memory import keep_freed_host_memory
        from blazr.loaders import Checkpoint

        keep_freed_host_memory()  # the decoder's large arrays, made afresh for every sentence
        self.model, self.config, self.path, self.tokenizer = model, config, path, tokenizer
        self.be = self.backend = model.be
        self.sample_rate = int(model.args.sampling_rate)
        name = path.name.removesuffix(".onnx") if path.is_file() else path.name
        directory = path if path.is_dir() else path.parent
        if tokenizer is None:  # Piper
            self.espeak_voice = config.get("espeak", {}).get("voice", "en-us")
            self.phoneme_ids: dict[str, list[int]] = config["phoneme_id_map"]
            inference = config.get("inference", {})
            self.noise_scale = float(inference.get("noise_scale", 0.667))
            self.length_scale = float(inference.get("length_scale", 1.0))
            self.noise_w = float(inference.get("noise_w", 0.8))
            language = config.get("language", {}).get("code") or self.espeak_voice
            self.voices = [Voice(id=str(config.get("dataset") or name), name=name, language=str(language))]
            fmt = "piper"
        else:  # transformers' VitsModel: its defaults are the config's (VitsModel reads the same keys)
            self.espeak_voice, self.phoneme_ids = None, {}
            self.noise_scale = float(config.get("noise_scale", 0.667))
            self.length_scale = 1.0 / float(config.get("speaking_rate", 1.0) or 1.0)
            self.noise_w = float(config.get("noise_scale_duration", 0.8))
            language = str(tokenizer.language or "")
            speakers = int(config.get("num_speakers", 1))
            self.voices = (
                [
                    Voice(id=f"{name}:{i}", name=f"{name} speaker {i}", language=language)
                    for i in range(speakers)
                ]
                if speakers > 1
                else [Voice(id=name, name=name, language=language)]
            )
            fmt = "safetensors"
        self.checkpoint = Checkpoint(path=path, format=fmt, config=config, tensors={}, directory=directory)

    @classmethod
    def load(cls, model: str | Path, device: Any = "cpu", voice_dir: str | Path | None = None) -> Any:
        """A voice on `device`: a Piper voice by path (its directory, .onnx or .onnx.json) or catalog name,
        or a Hugging Face VitsModel directory (config.json, model.safetensors, vocab.json); a Kokoro model
        gives a KokoroSynthesizer (same interface) with the voice packs of `voice_dir` too."""
        from blazr.backends import get_backend
        from blazr.backends.base import check_supports
        from blazr.loaders.piper import is_piper_voice, read_piper_voice, vits_config
        from blazr.loaders.vits_hf import is_hf_vits, read_hf_vits
        from blazr.model_dir import resolve_model
        from blazr.models.vits import Model, ModelArgs
        from blazr.tasks.speak_kokoro import KokoroSynthesizer, is_kokoro
        from blazr.tasks.vits_chars import CharTokenizer

        path = resolve_model(str(model))
        if is_kokoro(path):  # never a Piper voice: a kokoro-onnx .onnx has no .onnx.json beside it
            return KokoroSynthesizer.load(path, device, voice_dir)
        tokenizer = None
        if is_hf_vits(path) and not is_piper_voice(path):
            tokenizer = CharTokenizer.from_dir(path)
            config, weights = read_hf_vits(path)
            source, own_config = path / "model.safetensors", dict(config)
        else:
            voice = read_piper_voice(path)
            config, weights, source, own_config = vits_config(voice), voice.weights, voice.path, voice.config
        backend = get_backend(device) if isinstance(device, str) else device
        net = Model(ModelArgs.from_dict(config), backend)
        check_supports(backend, net.required_ops())
        net.load_weights(net.sanitize(weights), source=source)
        return cls(net, own_config, path, tokenizer)

    # ---- text -------------------------------------------------------------------------------------------

    def voice(self, name: str | None) -> Voice:
        """The voice called `name` (None or an OpenAI voice name: the default). InputError lists the voices."""
        if name is None or name in OPENAI_VOICES:
            return self.voices[0]
        for v in self.voices:
            if name in (v.id, v.name):
                return v
        known = ", ".join(v.id for v in self.voices)
        raise InputError(f"unknown voice {name!r}; this model's voices: {known}")

    def phonemize(self, text: str, voice: str | None = None) -> list[str]:
        """The text's sentences as phoneme strings (a character voice: as the characters it reads); every
        voice of a VITS model reads the same way, so `voice` (KokoroSynthesizer's interface) changes nothing."""
        if self.tokenizer is not None:
            pieces = (self.tokenizer.prepare(s) for s in _SENTENCE_END.split(text))
            return [p for p in pieces if p]
        from blazr.tasks.espeak_phonemes import phonemize

        return phonemize(text, self.espeak_voice)

    def ids(self, phonemes: str) -> np.ndarray:
        """Phonemes -> ids (T,): BOS, then each known phoneme followed by the pad, then EOS (Piper's layout;
        phonemes the voice lacks are skipped, as Piper does). A character voice: VitsTokenizer's ids."""
        if self.tokenizer is not None:
            return self.tokenizer.ids(phonemes)
        pad, ids = self.phoneme_ids["_"], list(self.phoneme_ids["^"]) + list(self.phoneme_ids["_"])
        for ch in phonemes:
            if ch in self.phoneme_ids:
                ids += self.phoneme_ids[ch] + pad
        return np.array(ids + self.phoneme_ids["$"], dtype=np.int32)

    # ---- speech -----------------------------------------------------------------------------------------

    def stream(
        self,
        text: str,
        voice: str | None = None,
        speed: float = 1.0,
        seed: int | None = None,
        noise_scale: float | None = None,
        noise_w: float | None = None,
    ) -> Iterator[tuple[str, np.ndarray]]:
        """(phonemes, audio (N,) float32 peak-normalised) of each sentence in turn. seed: reproducible noise (the
        same seed, text and settings give the same samples); None: fresh noise."""
        chosen = self.voice(voice)
        speaker = self.voices.index(chosen) if self.model.args.speaker_embedding_size else None
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ConfigError(f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}")
        sentences = self.phonemize(text)
        if not sentences:
            raise InputError("the input has nothing to speak")
        rng = np.random.default_rng(seed)
        ns = self.noise_scale if noise_scale is None else noise_scale
        nw = self.noise_w if noise_w is None else noise_w
        for phonemes in sentences:
            ids = self.ids(phonemes)
            audio = self.model.synthesize(ids, ns, self.length_scale / speed, nw, rng, speaker=speaker)
            yield phonemes, normalize(audio)

    def synthesize(
        self, text: str, voice: str | None = None, speed: float = 1.0, seed: int | None = None, **kw
    ) -> Speech:
        """The whole text as one Speech: its sentences back to back."""
        return joined_speech(self.stream(text, voice, speed, seed, **kw), self.sample_rate)


def joined_speech(sentences: Iterator[tuple[str, np.ndarray]], rate: int) -> Speech:
    """A voice's (phonemes, audio (N,)) sentences back to back as one Speech, each sentence's span kept."""
    pieces, spans, at = [], [], 0
    for phonemes, audio in sentences:
        pieces.append(audio)
        spans.append((phonemes, at, at + len(audio)))
        at += len(audio)
    audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return Speech(audio, rate, [SpokenSentence(p, a / rate, b / rate) for p, a, b in spans])


def normalize(audio: np.ndarray) -> np.ndarray:
    """Scale to peak 1 (no more than 100x: near-silence stays quiet), as Piper does before writing int16."""
    peak = float(np.abs(audio).max()) if len(audio) else 0.0
    return (audio * np.float32(1.0 / max(0.01, peak))).astype(np.float32)
