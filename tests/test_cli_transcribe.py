"""`blazr transcribe` on tiny random Whisper checkpoints (tests/tiny_whisper.py): each output format equals
the formatter's rendering of what the Transcriber returns for the same audio, files land where
--output-dir says, and every failure has its exit code (2 bad input, 3 not Whisper) without stopping the
other files."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from blazr.cli import app
from blazr.commands.transcribe import parse_temperature
from blazr.config import env_name, known_keys
from blazr.errors import ConfigError
from blazr.model_dir import resolve_model
from blazr.tasks.transcript_formats import render
from tests.tiny_whisper import random_audio, write

soundfile = pytest.importorskip("soundfile")
runner = CliRunner()
SECONDS = 4.0


_WHISPER: dict[str, Path] = {}


def whisper_dirs(tmp_path_factory) -> dict[str, Path]:
    """The tiny Whisper directories ("en", "multi"), written once per session: the CLI and server tests share
    them, so a transcript memoized by one is replayed to the other."""
    if not _WHISPER:
        root = tmp_path_factory.mktemp("whisper")
        # a 48-position decoder context: ~5x fewer tokens per window (tiny_whisper.config says why)
        _WHISPER.update({case: write(case, root / case, text_positions=48) for case in ("en", "multi")})
    return _WHISPER


@pytest.fixture(scope="module")
def whisper(tmp_path_factory) -> dict[str, Path]:
    return whisper_dirs(tmp_path_factory)


@pytest.fixture(scope="module")
def audio(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "talk.wav"
    soundfile.write(str(path), random_audio(SECONDS), 16000)
    return path


_DECODED: dict[tuple, object] = {}  # (model path, audio digest, options) -> Transcript, for this session


def memoized(original):
    """Transcriber.transcribe, each (model, audio, options) decoded once per session and replayed after
    (callbacks included). The tiny random model decodes slowly on the CPU (seconds per window: it babbles
    up to the token limit) and most tests here check what blazr does with a transcript, not the decoding;
    test_real_decoding_end_to_end runs it unmemoized."""

    def transcribe(self, audio, *, progress=None, on_segment=None, **options):
        digest = hashlib.sha256(np.asarray(audio, dtype=np.float32).tobytes()).hexdigest()
        options = {"language": None, "task": "transcribe", "initial_prompt": None, **options}
        options.setdefault("word_timestamps", False)
        key = (os.path.realpath(getattr(self, "path", id(self))), digest, repr(sorted(options.items())))
        if key not in _DECODED:
            _DECODED[key] = original(self, audio, **options)
        result = copy.deepcopy(_DECODED[key])
        for segment in result.segments:
            if on_segment is not None:
                on_segment(segment)
        if progress is not None:
            progress(result.duration / 2, result.duration)
            progress(result.duration, result.duration)
        return result

    return transcribe


@pytest.fixture
def quick(monkeypatch):
    from blazr.tasks.transcribe import Transcriber

    monkeypatch.setattr(Transcriber, "transcribe", memoized(Transcriber.transcribe))


def reference(model: Path, audio: Path, **options):
    """What the Transcriber itself returns for the test audio (greedy, so every run agrees)."""
    from blazr.audio import load_audio
    from blazr.tasks.transcribe import Transcriber

    transcribe = memoized(Transcriber.transcribe)
    return transcribe(Transcriber.load(model), load_audio(audio), temperature=0.0, **options)


@pytest.fixture(scope="module")
def expected(whisper, audio):
    return reference(whisper["en"], audio)


@pytest.fixture
def models(tmp_path, monkeypatch, quick) -> Path:
    """An empty model directory in BLAZR_MODEL_DIR; no user config or BLAZR_* variable leaks in.
    Transcriptions are memoized (`quick`)."""
    for key in known_keys():
        monkeypatch.delenv(env_name(key), raising=False)
    monkeypatch.setenv("BLAZR_CONFIG", str(tmp_path / "config.yaml"))
    directory = tmp_path / "models"
    directory.mkdir()
    monkeypatch.setenv("BLAZR_MODEL_DIR", str(directory))
    return directory


def transcribe(*args: str | Path):
    return runner.invoke(app, ["transcribe", *map(str, args)])


@pytest.mark.parametrize("fmt", ["txt", "srt", "vtt", "json", "verbose_json"])
def test_stdout_is_the_formatted_transcript(models, whisper, audio, expected, fmt):
    result = transcribe(audio, "--model", whisper["en"], "--format", fmt, "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == render(expected, fmt) + ("\n" if fmt.endswith("json") else "")


def test_words_on_stdout(models, whisper, audio):
    result = transcribe(audio, "--model", whisper["en"], "--format", "words", "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == render(reference(whisper["en"], audio, word_timestamps=True), "words")


def test_output_dir_gets_one_file_per_input(models, whisper, audio, expected, tmp_path):
    second = tmp_path / "second.flac"
    soundfile.write(str(second), random_audio(SECONDS), 16000)  # lossless: the same samples, decoded once
    out = tmp_path / "out" / "nested"
    result = transcribe(audio, second, "-m", whisper["en"], "-f", "srt", "-o", out, "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert sorted(p.name for p in out.iterdir()) == ["second.srt", "talk.srt"]  # no temporary files left
    assert (out / "talk.srt").read_text(encoding="utf-8") == render(expected, "srt")


def test_words_file_has_start_end_and_probability(models, whisper, audio, tmp_path):
    result = transcribe(audio, "-m", whisper["en"], "-f", "words", "-o", tmp_path, "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    lines = (tmp_path / "talk.words.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        word = json.loads(line)
        assert set(word) == {"word", "start", "end", "probability"}
        assert 0 <= word["start"] <= word["end"] <= SECONDS + 0.5 and 0 <= word["probability"] <= 1
    starts = [json.loads(line)["start"] for line in lines]
    assert starts == sorted(starts)


def test_verbose_json_with_word_timestamps(models, whisper, audio):
    result = transcribe(
        audio, "-m", whisper["en"], "-f", "verbose_json", "--word-timestamps", "--temperature", "0"
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["task"] == "transcribe" and body["language"] == "english"
    assert body["duration"] == pytest.approx(SECONDS, abs=0.01) and "words" in body and "segments" in body


def test_translate_with_a_multilingual_model(models, whisper, audio):
    args = ("-m", whisper["multi"], "-f", "verbose_json", "--task", "translate", "--language", "German")
    result = transcribe(audio, *args, "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["task"] == "translate" and body["language"] == "german"


def test_the_default_model_is_whisper_tiny_en_from_the_model_directory(models, whisper, audio, expected):
    (models / "whisper-tiny.en").symlink_to(whisper["en"], target_is_directory=True)
    result = transcribe(audio, "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == render(expected, "txt")


def test_a_bad_file_does_not_stop_the_others(models, whisper, audio, tmp_path):
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("this is not audio\n" * 50)
    empty = tmp_path / "empty.wav"
    soundfile.write(str(empty), random_audio(0.0), 16000)
    out = tmp_path / "out"
    args = (not_audio, tmp_path / "missing.wav", empty, audio, "-m", whisper["en"], "-o", out)
    result = transcribe(*args, "--temperature", "0")
    assert result.exit_code == 2, result.stderr
    for name in ("notes.wav", "missing.wav", "empty.wav"):
        assert name in result.stderr
    assert result.stderr.count("error:") == 3
    assert [p.name for p in out.iterdir()] == ["talk.txt"]


def test_a_model_that_is_not_whisper_exits_3(models, audio, tmp_path):
    from tests.server.conftest import write_tiny_gguf

    llm = write_tiny_gguf(tmp_path / "llama.gguf")
    result = transcribe(audio, "-m", llm)
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ")


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["--format", "docx"], "--format 'docx'"),
        (["--task", "summarize"], "--task 'summarize'"),
        (["--language", "klingon"], "--language 'klingon'"),
        (["--language", "de"], "--language de"),  # tiny.en knows English only
        (["--task", "translate"], "English-only"),
        (["--temperature", "1.5"], "--temperature"),
        (["--temperature", "warm"], "--temperature"),
        (["--model", "no-such-whisper"], "no-such-whisper"),
    ],
)
def test_bad_flags_exit_2(models, whisper, audio, args, phrase):
    result = transcribe(audio, "--model", whisper["en"], *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert phrase in result.stderr and result.stdout == ""


def test_subtitles_of_several_files_need_an_output_dir(models, whisper, audio):
    result = transcribe(audio, audio, "-m", whisper["en"], "-f", "vtt")
    assert result.exit_code == 2 and "--output-dir" in result.stderr


def test_inputs_with_one_name_would_overwrite_each_other(models, whisper, audio, tmp_path):
    twin = tmp_path / "other"
    twin.mkdir()
    soundfile.write(str(twin / "talk.wav"), random_audio(1.0), 16000)
    result = transcribe(audio, twin / "talk.wav", "-m", whisper["en"], "-o", tmp_path / "out")
    assert result.exit_code == 2 and "'talk'" in result.stderr


def test_progress_on_request_goes_to_stderr_only(models, whisper, audio, expected):
    result = transcribe(audio, "-m", whisper["en"], "--progress", "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == render(expected, "txt")
    lines = [line for line in result.stderr.splitlines() if line.startswith("talk.wav:")]
    assert lines and "100%" in lines[-1] and len(lines) <= 11  # one line per tenth at most, not per window
    quiet = transcribe(audio, "-m", whisper["en"], "--temperature", "0")  # not a terminal: no progress
    assert "talk.wav:" not in quiet.stderr


def test_temperature_parsing():
    assert parse_temperature(None) is None
    assert parse_temperature("0") == 0.0
    assert parse_temperature("0,0.2, 0.4") == (0.0, 0.2, 0.4)
    with pytest.raises(ConfigError):
        parse_temperature("0,-1")


def test_ggml_files_resolve_by_name_inside_the_model_directory(tmp_path):
    (tmp_path / "ggml-tiny.en.bin").write_bytes(b"lmgg")
    (tmp_path / "notes.bin").write_bytes(b"not a model")
    assert resolve_model("ggml-tiny.en", pull=False, directory=tmp_path) == tmp_path / "ggml-tiny.en.bin"
    assert resolve_model("ggml-tiny.en.bin", pull=False, directory=tmp_path) == tmp_path / "ggml-tiny.en.bin"
    with pytest.raises(Exception, match="not found"):
        resolve_model("notes", pull=False, directory=tmp_path)
    with pytest.raises(Exception, match="not found|may not contain|outside"):
        resolve_model("../ggml-tiny.en", pull=False, directory=tmp_path / "sub")


def test_real_decoding_end_to_end(tmp_path, monkeypatch, whisper, audio):
    """No memo in the command: it really decodes, and gives what the Transcriber gave."""
    monkeypatch.setenv("BLAZR_MODEL_DIR", str(tmp_path))
    want = reference(whisper["en"], audio)
    result = transcribe(audio, "--model", whisper["en"], "--format", "verbose_json", "--temperature", "0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == render(want, "verbose_json") + "\n"
