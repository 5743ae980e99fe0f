"""Transcriber: Whisper speech recognition of whole recordings, as openai-whisper's `transcribe()` does it.

The audio's log-mel is cut into 30 s windows from a moving `seek` point. Each window decodes with timestamp
tokens (blazr.tasks.whisper_decoding) and falls back to higher temperatures when the text loops
(compression ratio > 2.4) or is unlikely (mean log-probability < -1); a window whose <|nospeech|>
probability is > 0.6 while its text is unlikely is skipped as silence. The timestamp pairs cut the window's
tokens into segments, and the next window starts at the last timestamp (or after the window when it ended
in mid-segment). The previous text conditions the next window unless the last window needed a temperature
above 0.5 (a hallucination should not feed the next one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import InputError
from blazr.tasks.transcript import Segment, Transcript
from blazr.tasks.whisper_decoding import DecodingOptions, WindowJob, decode_windows, initial_tokens
from blazr.tasks.whisper_vocab import LANGUAGES, TIME_PRECISION, WhisperVocabulary

TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6
INPUT_STRIDE = 2  # mel frames per encoder position (and per 0.02 s timestamp step)


class Transcriber:
    """A loaded Whisper model and its vocabulary. `transcribe(audio)` runs a whole recording."""

    task = "transcribe"

    def __init__(self, model, vocab: WhisperVocabulary, config: dict[str, Any], path: Path):
        self.model, self.vocab, self.config, self.path = model, vocab, config, path
        self.be = model.be

    @classmethod
    def load(cls, model: str | Path, device: Any = "cpu") -> Transcriber:
        """A Whisper model by path (HF or CTranslate2 directory, whisper.cpp .bin) or catalog name, on
        `device` (a name as blazr.load takes, or a backend). UnsupportedError when it is not Whisper."""
        from blazr.backends import get_backend
        from blazr.loaders.whisper_formats import read_whisper_checkpoint
        from blazr.model_dir import resolve_model
        from blazr.models.whisper import Model, ModelArgs

        path = resolve_model(str(model))
        config, weights = read_whisper_checkpoint(path)
        backend = get_backend(device) if isinstance(device, str) else device
        from blazr.backends.base import check_supports

        net = Model(ModelArgs.from_dict(config), backend)
        check_supports(backend, net.required_ops())
        net.load_weights(net.sanitize(weights), source=path)
        directory = path if path.is_dir() else None
        return cls(net, WhisperVocabulary.from_directory(net.args.vocab_size, directory), config, path)

    # ---- what it knows -----------------------------------------------------------------------------------

    @property
    def multilingual(self) -> bool:
        return self.vocab.multilingual

    @property
    def languages(self) -> tuple[str, ...]:
        return self.vocab.languages

    @property
    def n_mels(self) -> int:
        return self.model.args.num_mel_bins

    def suppress_tokens(self) -> tuple[int, ...]:
        """The checkpoint's suppress list (generation config, CTranslate2 config), else openai-whisper's
        non-speech symbols; plus the task and prompt tokens, which a transcript never holds."""
        v = self.vocab
        listed = self.config.get("suppress_tokens")
        own = [t for t in listed if t >= 0] if listed else list(v.non_speech_tokens)
        return tuple(sorted({*own, v.transcribe, v.translate, v.sot, v.sot_prev, v.sot_lm, v.no_speech}))

    # ---- running -----------------------------------------------------------------------------------------

    def detect_language(self, mel: np.ndarray) -> tuple[str, dict[str, float]]:
        """The most likely language of a window (n_mels, 3000), and every language's probability."""
        v = self.vocab
        if not v.multilingual:
            return "en", {"en": 1.0}
        cache = self.model.new_cache(1)
        self.model.encode(mel, cache, 0)
        logits = self.model.decode(cache, np.array([0]), [np.array([v.sot])])[0]  # (V,)
        lang = np.array(v.language_tokens)
        scores = logits[lang].astype(np.float64)
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        codes = v.languages
        return codes[int(np.argmax(probs))], dict(zip(codes, probs.tolist(), strict=True))

    def transcribe(
        self,
        audio: np.ndarray,
        *,
        language: str | None = None,
        task: str = "transcribe",
        initial_prompt: str | None = None,
        temperature: float | Sequence[float] = TEMPERATURES,
        beam_size: int | None = 5,
        best_of: int | None = 5,
        condition_on_previous_text: bool = True,
        suppress_blank: bool = True,
        word_timestamps: bool = False,
        progress: Callable[[float, float], None] | None = None,
        on_segment: Callable[[Segment], None] | None = None,
    ) -> Transcript:
        """Transcribe (or, with task="translate", translate to English) 16 kHz mono float32 audio."""
        from blazr.audio import HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel_spectrogram, pad_or_trim

        v = self.vocab
        if task not in ("transcribe", "translate"):
            raise InputError(f"task {task!r} is unknown; use transcribe or translate", param="task")
        if task == "translate" and not v.multilingual:
            raise InputError(
                "this English-only model cannot translate; use a multilingual model", param="task"
            )
        audio = np.asarray(audio, dtype=np.float32)
        mel = log_mel_spectrogram(audio, self.n_mels, padding=N_SAMPLES)  # (n_mels, frames + 3000)
        frames = mel.shape[-1] - N_FRAMES
        duration = frames * HOP_LENGTH / SAMPLE_RATE
        if language is not None:
            language = v.language_code(language)
        elif v.multilingual:
            language, _ = self.detect_language(pad_or_trim(mel[:, :N_FRAMES], N_FRAMES))
        else:
            language = "en"
        sot_sequence = v.sot_sequence(language, task)
        temperatures = (temperature,) if isinstance(temperature, int | float) else tuple(temperature)
        options = dict(
            beam_size=beam_size,
            best_of=best_of,
            suppress=self.suppress_tokens(),
            suppress_blank=suppress_blank,
        )

        prompt_tokens = v.encode(" " + initial_prompt.strip()) if initial_prompt else []
        all_tokens, prompt_reset = list(prompt_tokens), 0
        segments: list[Segment] = []
        seek, last_speech = 0, 0.0
        while seek < frames:
            size = min(N_FRAMES, frames - seek)
            window_mel = pad_or_trim(mel[:, seek : seek + size], N_FRAMES)  # (n_mels, 3000)
            result, cache = self._decode_with_fallback(
                window_mel, sot_sequence, all_tokens[prompt_reset:], temperatures, options
            )
            previous_seek = seek
            if result.no_speech_prob > NO_SPEECH_THRESHOLD and result.avg_logprob <= LOGPROB_THRESHOLD:
                seek += size  # silence: skip the window
            else:
                found, seek, single_ending = self._segments(result, seek, size)
                if word_timestamps and found:
                    last_speech = self._add_words(cache, found, sot_sequence, size, language, last_speech)
                    ends = [w.end for s in found for w in s.words]
                    # the next window starts after the last word, unless this one ended mid-segment
                    if not single_ending and ends and ends[-1] > previous_seek * HOP_LENGTH / SAMPLE_RATE:
                        seek = round(ends[-1] * SAMPLE_RATE / HOP_LENGTH)
                for segment in found:  # openai-whisper empties zero-length and blank segments
                    if segment.start == segment.end or not segment.text.strip():
                        segment.text, segment.tokens, segment.words = "", [], []
                found = [s for s in found if s.tokens]
                for segment in found:
                    segment.id = len(segments)
                    segments.append(segment)
                    all_tokens.extend(segment.tokens)
                    if on_segment is not None:
                        on_segment(segment)
                if not condition_on_previous_text or result.temperature > 0.5:
                    prompt_reset = len(all_tokens)
            if progress is not None:
                progress(min(seek, frames) * HOP_LENGTH / SAMPLE_RATE, duration)
            if seek <= previous_seek:  # never loop on one window
                seek = previous_seek + size
        text = "".join(s.text for s in segments)
        return Transcript(text=text, language=language, duration=duration, segments=segments)

    def _decode_with_fallback(self, mel, sot_sequence, previous, temperatures, options):
        """Decode at each temperature in turn until the text neither loops nor is unlikely (or silence)."""
        prompt, sot_index = initial_tokens(self.vocab, sot_sequence, previous, timestamps=True)
        cache = None
        result = None
        for t in temperatures:
            opts = DecodingOptions(
                temperature=t,
                beam_size=options["beam_size"] if t == 0 else None,
                best_of=options["best_of"] if t > 0 else None,
                suppress=options["suppress"],
                suppress_blank=options["suppress_blank"],
                seed=int(t * 1000),
            )
            if cache is None or cache.seqs_per_window != opts.group:
                cache = self.model.new_cache(1, opts.group)
                self.model.encode(mel, cache, 0)
            result = decode_windows(self.model, cache, self.vocab, [WindowJob(0, prompt, sot_index)], opts)[0]
            too_repetitive = result.compression_ratio > COMPRESSION_RATIO_THRESHOLD
            too_unlikely = result.avg_logprob < LOGPROB_THRESHOLD
            silence = result.no_speech_prob > NO_SPEECH_THRESHOLD and too_unlikely
            if silence or not (too_repetitive or too_unlikely):
                break
        return result, cache

    def _segments(self, result, seek: int, size: int) -> tuple[list[Segment], int, bool]:
        """Cut a window's tokens at its timestamp pairs; returns the segments, the next seek (frames) and
        whether the window ended on a lone timestamp (its last segment runs on into the next window)."""
        from blazr.audio import HOP_LENGTH, SAMPLE_RATE

        v, tokens = self.vocab, result.tokens
        offset = seek * HOP_LENGTH / SAMPLE_RATE
        is_ts = [t >= v.timestamp_begin for t in tokens]
        single_ending = is_ts[-2:] == [False, True]
        cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
        out: list[Segment] = []

        def segment(start: float, end: float, part: list[int]) -> Segment:
            text = v.decode(part)
            return Segment(
                id=0,
                seek=seek,
                start=round(start, 3),
                end=round(end, 3),
                text=text,
                tokens=list(part),
                temperature=result.temperature,
                avg_logprob=result.avg_logprob,
                compression_ratio=result.compression_ratio,
                no_speech_prob=result.no_speech_prob,
            )

        if cuts:
            if single_ending:
                cuts.append(len(tokens))
            last = 0
            for cut in cuts:
                part = tokens[last:cut]
                start = (part[0] - v.timestamp_begin) * TIME_PRECISION
                end = (part[-1] - v.timestamp_begin) * TIME_PRECISION
                out.append(segment(offset + start, offset + end, part))
                last = cut
            next_seek = (
                seek + size if single_ending else seek + (tokens[last - 1] - v.timestamp_begin) * INPUT_STRIDE
            )
        else:
            duration = size * HOP_LENGTH / SAMPLE_RATE
            stamps = [t for t in tokens if t >= v.timestamp_begin]
            if stamps and stamps[-1] != v.timestamp_begin:
                duration = (stamps[-1] - v.timestamp_begin) * TIME_PRECISION
            out.append(segment(offset, offset + duration, tokens))
            next_seek = seek + size
        return out, next_seek, single_ending

    def _add_words(
        self, cache, segments: list[Segment], sot_sequence, frames: int, language: str, last_speech
    ):
        """Word timestamps of one window's segments (blazr.tasks.word_timing); returns the end of speech."""
        from blazr.audio import HOP_LENGTH, SAMPLE_RATE
        from blazr.tasks import word_timing

        v, model = self.vocab, self.model
        text = [t for s in segments for t in s.tokens if t < v.eot]
        if not text:
            return last_speech
        tokens = [*sot_sequence, v.no_timestamps, *text, v.eot]
        cache.truncate(np.arange(len(cache.lengths)), 0)
        logits = model.decode(
            cache, np.array([0]), [np.array(tokens)], all_logits=True, capture=True
        )  # (T, V)
        sampled = logits[len(sot_sequence) : len(sot_sequence) + len(text), : v.eot].astype(np.float64)
        sampled = np.exp(sampled - sampled.max(axis=-1, keepdims=True))
        probs = (sampled / sampled.sum(axis=-1, keepdims=True))[np.arange(len(text)), text]  # (text,)
        a = model.args
        heads = word_timing.alignment_heads(self.config, a.decoder_layers, a.decoder_attention_heads)
        scale = (a.d_model // a.decoder_attention_heads) ** -0.5
        qk = []
        for layer, head in heads:
            q = self.be.download(cache.captured[layer])[:, head]  # (T, Dh)
            k = self.be.download(cache.cross_keys(layer, 0)[0])[:, head]  # (P, Dh)
            qk.append(q @ k.T * scale)  # (T, P)
        cache.captured.clear()
        alignment = word_timing.find_alignment(
            np.stack(qk), probs, v, text, frames, len(sot_sequence), language
        )
        offset = segments[0].seek * HOP_LENGTH / SAMPLE_RATE
        return word_timing.assign_words(segments, alignment, v, offset, last_speech)


def language_name(code: str) -> str:
    """ "en" -> "english": the name OpenAI's verbose_json reports."""
    return dict(LANGUAGES).get(code, code)
