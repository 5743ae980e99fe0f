"""Transcriber: a loaded Whisper model, and speech recognition of whole recordings with it.

The loop over a recording's 30 s windows is openai-whisper's `transcribe()` (blazr.tasks.transcribe_run);
`run_batch` advances several recordings together, decoding their pending windows in one batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import ConfigError
from blazr.tasks.transcribe_run import RunOptions, TranscriptionRun
from blazr.tasks.transcript import Transcript
from blazr.tasks.whisper_decoding import WindowJob, decode_windows
from blazr.tasks.whisper_vocab import WhisperVocabulary


class Transcriber:
    """A loaded Whisper model and its vocabulary. `transcribe(audio)` runs a whole recording."""

    task = "transcribe"

    def __init__(self, model, vocab: WhisperVocabulary, config: dict[str, Any], path: Path, fmt: str):
        from blazr.loaders import Checkpoint

        self.model, self.vocab, self.config, self.path = model, vocab, config, path
        self.be = self.backend = model.be
        # what the server's model listings read from every loaded model (format, config, files)
        directory = path if path.is_dir() else path.parent
        self.checkpoint = Checkpoint(path=path, format=fmt, config=config, tensors={}, directory=directory)

    @classmethod
    def load(cls, model: str | Path, device: Any = "cpu", dtype: str | None = None) -> Transcriber:
        """A Whisper model by path (HF or CTranslate2 directory, whisper.cpp .bin) or catalog name, on
        `device` (a name as blazr.load takes, or a backend). dtype None or "f32": float32 weights and
        activations; "q8": matrices packed to Q8_0 at load and multiplied with int8 activations where the
        backend does (faster-whisper's int8). UnsupportedError when it is not Whisper."""
        from blazr.backends import get_backend
        from blazr.backends.base import check_supports
        from blazr.loaders.whisper_formats import read_whisper_checkpoint, whisper_format
        from blazr.model_dir import resolve_model
        from blazr.models.whisper import Model, ModelArgs

        path = resolve_model(str(model))
        config, weights = read_whisper_checkpoint(path)
        backend = get_backend(device) if isinstance(device, str) else device
        if hasattr(backend, "numba_matmul_rows"):
            # decode steps are a few rows (beams x windows); their matmuls are small but many, and
            # OpenBLAS's thread hand-off costs more than the work (blazr.backends.cpu)
            backend.numba_matmul_rows = 16
        net = Model(ModelArgs.from_dict(config), backend)
        check_supports(backend, net.required_ops())
        if dtype not in (None, "f32", "q8"):
            raise ConfigError(f"--dtype {dtype!r}: a Whisper model runs in f32 or q8")
        set_int8 = getattr(backend, "set_int8_activations", None)
        if set_int8 is not None:
            set_int8(dtype == "q8")
        net.load_weights(net.sanitize(weights), source=path, quantize="Q8_0" if dtype == "q8" else None)
        directory = path if path.is_dir() else None
        vocab = WhisperVocabulary.from_directory(net.args.vocab_size, directory)
        return cls(net, vocab, config, path, whisper_format(path) or "safetensors")

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

    def transcribe(self, audio: np.ndarray, **options: Any) -> Transcript:
        """Transcribe (or, with task="translate", translate to English) 16 kHz mono float32 audio.
        options: blazr.tasks.transcribe_run.RunOptions (language, task, initial_prompt, temperature,
        beam_size, best_of, condition_on_previous_text, suppress_blank, word_timestamps, progress,
        on_segment)."""
        run = self.start(audio, **options)
        self.run_batch([run])
        if run.error is not None:
            raise run.error
        return run.transcript()

    def start(self, audio: np.ndarray, **options: Any) -> TranscriptionRun:
        """A run for `audio`, to advance with run_batch (alone or beside others)."""
        return TranscriptionRun(self, audio, RunOptions(**options))

    def run_batch(self, runs: list[TranscriptionRun], rounds: int | None = None) -> None:
        """Advance the runs until all are done (or for `rounds` rounds). Each round decodes every unfinished
        run's pending attempt, those with the same decoding options in one batch. A run whose callbacks or
        decode raise ends with run.error set; the others go on."""
        done = 0
        while any(not r.done for r in runs) and (rounds is None or done < rounds):
            groups: dict[tuple, list] = {}
            for run in runs:
                if not run.done:
                    attempt = run.attempt()
                    o = attempt.options
                    key = (o.temperature, o.beam_size, o.best_of, o.suppress, o.suppress_blank)
                    groups.setdefault(key, []).append((run, attempt))
            for group in groups.values():
                self._decode_group(group)
            done += 1

    def _decode_group(self, group: list) -> None:
        """One batched decode of attempts with the same options, one cache window each."""
        options = group[0][1].options
        try:
            cache = self.model.new_cache(len(group), options.group)
            for window, (_, attempt) in enumerate(group):
                self.model.encode(attempt.mel, cache, window)
            jobs = [WindowJob(w, a.prompt, a.sot_index, a.seed) for w, (_, a) in enumerate(group)]
            results = decode_windows(self.model, cache, self.vocab, jobs, options)
        except Exception as error:  # the whole batch failed: each of its runs ends with the error
            for run, _ in group:
                run.error = error
            return
        for window, ((run, _), result) in enumerate(zip(group, results, strict=True)):
            try:
                run.finish(result, cache, window)
            except Exception as error:  # a callback (the client went away) or word timing: this run only
                run.error = error
