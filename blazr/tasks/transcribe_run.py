"""TranscriptionRun: one recording's transcription, advanced one window attempt at a time.

openai-whisper's `transcribe()` loop, cut at each decode: `attempt()` says what to decode next (the window
at `seek`, its prompt, the decoding options of the current temperature) and `finish()` takes the result:
either the same window again at the next temperature (the text looped, compression ratio > 2.4, or was
unlikely, mean log-probability < -1), or the window cut into segments at its timestamp pairs, words timed,
and `seek` moved to the last timestamp (or past the window when it ended mid-segment). A window whose
<|nospeech|> probability is > 0.6 while its text is unlikely is skipped as silence. The previous text
conditions the next window unless the last needed a temperature above 0.5. Transcriber.run_batch decodes
the pending attempts of many runs in one batch (several requests, several files).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from blazr.audio import HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel_spectrogram, pad_or_trim
from blazr.errors import InputError
from blazr.tasks.transcript import Segment, Transcript
from blazr.tasks.whisper_decoding import DecodingOptions, initial_tokens
from blazr.tasks.whisper_vocab import TIME_PRECISION

TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6
INPUT_STRIDE = 2  # mel frames per encoder position (and per 0.02 s timestamp step)


@dataclass
class RunOptions:
    language: str | None = None  # None: detected from the first window (multilingual models)
    task: str = "transcribe"  # or "translate" (to English)
    initial_prompt: str | None = None
    temperature: float | Sequence[float] = TEMPERATURES  # tried in turn (fallback)
    beam_size: int | None = 5  # at temperature 0; None: greedy
    best_of: int | None = 5  # samples at temperatures > 0
    condition_on_previous_text: bool = True
    suppress_blank: bool = True
    word_timestamps: bool = False
    progress: Callable[[float, float], None] | None = None  # (seconds done, seconds in all)
    on_segment: Callable[[Segment], None] | None = None  # each segment as soon as it is final


@dataclass
class Attempt:
    """One decode a run asks for: a 30 s window of log-mel, its prompt and options."""

    mel: np.ndarray  # (n_mels, 3000)
    prompt: list[int]
    sot_index: int
    options: DecodingOptions
    seed: int  # sampling seed of this window and attempt


class TranscriptionRun:
    def __init__(self, transcriber, audio: np.ndarray, opts: RunOptions):
        v = transcriber.vocab
        if opts.task not in ("transcribe", "translate"):
            raise InputError(f"task {opts.task!r} is unknown; use transcribe or translate", param="task")
        if opts.task == "translate" and not v.multilingual:
            raise InputError(
                "this English-only model cannot translate; use a multilingual model", param="task"
            )
        self.t, self.vocab, self.opts = transcriber, v, opts
        audio = np.asarray(audio, dtype=np.float32)
        self.mel = log_mel_spectrogram(
            audio, transcriber.n_mels, padding=N_SAMPLES
        )  # (n_mels, frames + 3000)
        self.frames = self.mel.shape[-1] - N_FRAMES
        self.duration = self.frames * HOP_LENGTH / SAMPLE_RATE
        if opts.language is not None:
            self.language = v.language_code(opts.language)
        elif v.multilingual:
            self.language, _ = transcriber.detect_language(pad_or_trim(self.mel[:, :N_FRAMES], N_FRAMES))
        else:
            self.language = "en"
        self.sot_sequence = v.sot_sequence(self.language, opts.task)
        temps = opts.temperature
        self.temperatures = (temps,) if isinstance(temps, int | float) else tuple(temps)
        self.suppress = transcriber.suppress_tokens()
        prompt_tokens = v.encode(" " + opts.initial_prompt.strip()) if opts.initial_prompt else []
        self.all_tokens, self.prompt_reset = list(prompt_tokens), 0
        self.segments: list[Segment] = []
        self.seek, self.last_speech, self.try_index = 0, 0.0, 0
        self.error: Exception | None = None  # what ended this run early (its callbacks, a failed decode)

    @property
    def done(self) -> bool:
        return self.error is not None or self.seek >= self.frames

    @property
    def size(self) -> int:
        """Mel frames of audio in the current window."""
        return min(N_FRAMES, self.frames - self.seek)

    def attempt(self) -> Attempt:
        t = self.temperatures[self.try_index]
        options = DecodingOptions(
            temperature=t,
            beam_size=self.opts.beam_size if t == 0 else None,
            best_of=self.opts.best_of if t > 0 else None,
            suppress=self.suppress,
            suppress_blank=self.opts.suppress_blank,
            seed=int(t * 1000),
        )
        previous = self.all_tokens[self.prompt_reset :]
        n_ctx = self.t.model.args.max_target_positions
        prompt, sot_index = initial_tokens(self.vocab, self.sot_sequence, previous, True, n_ctx)
        mel = pad_or_trim(self.mel[:, self.seek : self.seek + self.size], N_FRAMES)  # (n_mels, 3000)
        return Attempt(mel, prompt, sot_index, options, seed=self.seek * 8 + self.try_index)

    def finish(self, result, cache, window: int) -> None:
        """Take the decode of the current attempt (window `window` of `cache` still holds its audio)."""
        too_repetitive = result.compression_ratio > COMPRESSION_RATIO_THRESHOLD
        too_unlikely = result.avg_logprob < LOGPROB_THRESHOLD
        silence = result.no_speech_prob > NO_SPEECH_THRESHOLD and too_unlikely
        if (too_repetitive or too_unlikely) and not silence and self.try_index + 1 < len(self.temperatures):
            self.try_index += 1  # this window again, hotter
            return
        self.try_index = 0
        seek, size = self.seek, self.size
        if silence:
            self.seek += size  # skip the window
        else:
            found, self.seek, single_ending = self._segments(result, seek, size)
            if self.opts.word_timestamps and found:
                self.last_speech = self._add_words(cache, window, found, size)
                ends = [w.end for s in found for w in s.words]
                # the next window starts after the last word, unless this one ended mid-segment
                if not single_ending and ends and ends[-1] > seek * HOP_LENGTH / SAMPLE_RATE:
                    self.seek = round(ends[-1] * SAMPLE_RATE / HOP_LENGTH)
            for segment in found:  # openai-whisper empties zero-length and blank segments
                if segment.start == segment.end or not segment.text.strip():
                    segment.text, segment.tokens, segment.words = "", [], []
            for segment in (s for s in found if s.tokens):
                segment.id = len(self.segments)
                self.segments.append(segment)
                self.all_tokens.extend(segment.tokens)
                if self.opts.on_segment is not None:
                    self.opts.on_segment(segment)
            if not self.opts.condition_on_previous_text or result.temperature > 0.5:
                self.prompt_reset = len(self.all_tokens)
        if self.seek <= seek:  # never loop on one window
            self.seek = seek + size
        if self.opts.progress is not None:
            self.opts.progress(min(self.seek, self.frames) * HOP_LENGTH / SAMPLE_RATE, self.duration)

    def transcript(self) -> Transcript:
        text = "".join(s.text for s in self.segments)
        return Transcript(text=text, language=self.language, duration=self.duration, segments=self.segments)

    def _segments(self, result, seek: int, size: int) -> tuple[list[Segment], int, bool]:
        """Cut a window's tokens at its timestamp pairs; returns the segments, the next seek (frames) and
        whether the window ended on a lone timestamp (its last segment runs on into the next window)."""
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

    def _add_words(self, cache, window: int, segments: list[Segment], frames: int) -> float:
        """Word timestamps of one window's segments (blazr.tasks.word_timing); returns the end of speech."""
        from blazr.tasks import word_timing

        v, model, be = self.vocab, self.t.model, self.t.be
        text = [t for s in segments for t in s.tokens if t < v.eot]
        if not text:
            return self.last_speech
        sot = self.sot_sequence
        tokens = [*sot, v.no_timestamps, *text, v.eot]
        seq = window * cache.seqs_per_window  # the window's first sequence, reused from its start
        cache.truncate(np.array([seq]), 0)
        logits = model.decode(
            cache, np.array([seq]), [np.array(tokens)], all_logits=True, capture=True
        )  # (T, V)
        sampled = logits[len(sot) : len(sot) + len(text), : v.eot].astype(np.float64)
        sampled = np.exp(sampled - sampled.max(axis=-1, keepdims=True))
        probs = (sampled / sampled.sum(axis=-1, keepdims=True))[np.arange(len(text)), text]  # (text,)
        a = model.args
        heads = word_timing.alignment_heads(self.t.config, a.decoder_layers, a.decoder_attention_heads)
        scale = (a.d_model // a.decoder_attention_heads) ** -0.5
        qk = []
        for layer, head in heads:
            q = be.download(cache.captured[layer])[:, head]  # (T, Dh)
            k = be.download(cache.cross_keys(layer, window)[0])[:, head]  # (P, Dh)
            qk.append(q @ k.T * scale)  # (T, P)
        cache.captured.clear()
        alignment = word_timing.find_alignment(np.stack(qk), probs, v, text, frames, len(sot), self.language)
        offset = segments[0].seek * HOP_LENGTH / SAMPLE_RATE
        return word_timing.assign_words(segments, alignment, v, offset, self.last_speech)
