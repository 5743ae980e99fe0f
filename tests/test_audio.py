"""blazr.audio: decoding files to 16 kHz mono, and Whisper's log-mel front end against openai-whisper's own."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile

from blazr.audio import (
    HOP_LENGTH,
    N_FRAMES,
    N_SAMPLES,
    SAMPLE_RATE,
    load_audio,
    log_mel_spectrogram,
    mel_filters,
    pad_or_trim,
)
from blazr.errors import AudioError, InputError
from tests import speech_set

GOLDEN = Path(__file__).parent / "golden" / "whisper"
# Measured: the filters agree to 4e-9 (float32 rounding of the same float64 formula); the log-mel to 4e-5 here
# and 7.2e-5 at worst over every speech clip (torch's float32 STFT against this float64 one).
FILTER_ATOL = 1e-7
LOG_MEL_ATOL = 1e-4


def sine(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)  # (samples,)


def dominant_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))  # (samples // 2 + 1,)
    return float(np.argmax(spectrum) * rate / audio.size)


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))


def encode(audio: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def wav_with_format_tag(tag: int) -> bytes:
    wav = bytearray(encode(sine(440, SAMPLE_RATE, 0.1), SAMPLE_RATE, "WAV", "PCM_16"))
    wav[20:22] = struct.pack("<H", tag)  # the 'fmt ' chunk's codec field
    return bytes(wav)


# ---- log-mel front end --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_equal_whisper_assets(n_mels):
    with np.load(GOLDEN / "mel_filters.npz") as reference:
        expected = reference[f"mel_{n_mels}"]  # (n_mels, 201)
    got = mel_filters(n_mels)
    assert got.shape == expected.shape == (n_mels, 201) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=FILTER_ATOL)
    assert mel_filters(n_mels) is got and not got.flags.writeable  # cached, shared read-only


@pytest.mark.parametrize("case", ["speech_80", "speech_128", "short_padded_80"])
def test_log_mel_matches_openai_whisper(case):
    with np.load(GOLDEN / "log_mel.npz") as reference:
        expected = reference[case]  # (n_mels, frames)
        clip, start, stop, n_mels, padding = (int(v) for v in reference[f"{case}_input"])
    audio = load_audio(speech_set.path(clip))[start:stop]  # (stop - start,)
    got = log_mel_spectrogram(audio, n_mels=n_mels, padding=padding)
    assert got.dtype == np.float32
    assert got.shape == expected.shape == (n_mels, (stop - start + padding) // HOP_LENGTH)
    np.testing.assert_allclose(got, expected, rtol=0, atol=LOG_MEL_ATOL)


def test_log_mel_of_a_padded_window_has_the_encoder_shape():
    audio = pad_or_trim(speech_set.load(3))  # (N_SAMPLES,)
    assert log_mel_spectrogram(audio).shape == (80, N_FRAMES)
    assert log_mel_spectrogram(audio[:100]).shape == (80, 0)  # shorter than one hop: no frames


def test_pad_or_trim():
    audio = np.arange(10, dtype=np.float32)
    assert pad_or_trim(audio, 4).tolist() == [0, 1, 2, 3]
    assert pad_or_trim(audio, 12).tolist() == list(range(10)) + [0, 0]
    assert pad_or_trim(audio).shape == (N_SAMPLES,)
    mel = np.ones((80, 5), dtype=np.float32)
    padded = pad_or_trim(mel, 8, axis=-1)
    assert padded.shape == (80, 8) and padded[:, 5:].sum() == 0
    assert pad_or_trim(mel, 40, axis=0).shape == (40, 5)


# ---- decoding -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "subtype", "atol"),
    [
        ("WAV", "PCM_16", 1 / 32768),
        ("WAV", "PCM_24", 1e-6),
        ("WAV", "PCM_32", 1e-7),
        ("WAV", "FLOAT", 0),
        ("WAV", "PCM_U8", 1 / 128),
        ("FLAC", "PCM_16", 1 / 32768),
        ("FLAC", "PCM_24", 1e-6),
    ],
)
def test_lossless_files_decode_to_their_samples(tmp_path, fmt, subtype, atol):
    audio = sine(440, SAMPLE_RATE)
    path = tmp_path / f"tone.{fmt.lower()}"
    soundfile.write(path, audio, SAMPLE_RATE, format=fmt, subtype=subtype)
    got = load_audio(path)
    assert got.dtype == np.float32 and got.shape == audio.shape
    np.testing.assert_allclose(got, audio, rtol=0, atol=atol)


@pytest.mark.parametrize("fmt", ["OGG", "MP3"])
def test_lossy_files_keep_pitch_and_level(tmp_path, fmt):
    audio = sine(440, SAMPLE_RATE)
    path = tmp_path / f"tone.{fmt.lower()}"
    path.write_bytes(encode(audio, SAMPLE_RATE, fmt))
    got = load_audio(str(path))
    assert abs(got.size - audio.size) < 0.1 * SAMPLE_RATE  # MP3 adds encoder delay and padding
    assert abs(dominant_hz(got, SAMPLE_RATE) - 440) <= 2
    assert rms(got) == pytest.approx(rms(audio), rel=0.05)


def test_stereo_is_averaged_to_mono(tmp_path):
    left = sine(440, SAMPLE_RATE)
    stereo = np.stack([left, -0.5 * left], axis=1)  # (samples, 2)
    soundfile.write(tmp_path / "stereo.wav", stereo, SAMPLE_RATE, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(tmp_path / "stereo.wav"), 0.25 * left, atol=1e-7)


@pytest.mark.parametrize(("rate", "freq"), [(44100, 440.0), (8000, 1000.0), (48000, 3000.0)])
def test_other_rates_are_resampled_to_16k(tmp_path, rate, freq):
    audio = sine(freq, rate, seconds=2.0)  # a known tone: judged by its pitch and energy, not by itself
    soundfile.write(tmp_path / "tone.wav", audio, rate, subtype="FLOAT")
    got = load_audio(tmp_path / "tone.wav")
    assert got.dtype == np.float32
    assert abs(got.size - 2 * SAMPLE_RATE) <= 1
    assert abs(dominant_hz(got, SAMPLE_RATE) - freq) <= 1
    assert rms(got[1000:-1000]) == pytest.approx(0.5 / np.sqrt(2), rel=0.01)  # ends: the filter's ramp


def test_sample_rate_argument(tmp_path):
    soundfile.write(tmp_path / "tone.wav", sine(440, SAMPLE_RATE), SAMPLE_RATE)
    got = load_audio(tmp_path / "tone.wav", sample_rate=24000)
    assert got.size == 24000 and abs(dominant_hz(got, 24000) - 440) <= 1


def test_bytes_with_a_filename_hint(tmp_path):
    path = speech_set.path(1)
    from_bytes = load_audio(path.read_bytes(), filename="upload.flac")
    np.testing.assert_array_equal(from_bytes, load_audio(path))
    np.testing.assert_array_equal(from_bytes, speech_set.load(1))


def test_streamed_wav_of_unknown_length_reads_to_the_end():
    wav = bytearray(encode(sine(440, SAMPLE_RATE), SAMPLE_RATE, "WAV", "PCM_16"))
    assert wav[36:40] == b"data"
    wav[40:44] = struct.pack("<I", 0xFFFFFFFF)  # what a writer that cannot seek back leaves
    assert load_audio(bytes(wav), filename="live.wav").size == SAMPLE_RATE


def test_wav_with_large_metadata_before_its_samples():
    """The 'data' chunk lies past the bytes the truncation check looks at; the file still reads whole."""
    wav = encode(sine(440, SAMPLE_RATE), SAMPLE_RATE, "WAV", "PCM_16")
    junk = b"JUNK" + struct.pack("<I", 100_000) + bytes(100_000)
    body = wav[12:36] + junk + wav[36:]  # 'fmt ' chunk, the junk, then 'data'
    padded = b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body
    np.testing.assert_array_equal(
        load_audio(padded, filename="big.wav"), load_audio(wav, filename="plain.wav")
    )


def test_speech_set_is_complete_and_long_form_places_every_sentence():
    texts = speech_set.sentences()
    assert len(texts) >= 20 and all(6 <= len(t.split()) <= 15 for t in texts)
    audio, spans = speech_set.long_form(seconds_of_silence=0.5)
    assert audio.dtype == np.float32 and [text for text, _, _ in spans] == list(texts)
    for (_, _, end), (_, start, _) in zip(spans[:-1], spans[1:], strict=True):
        assert start == pytest.approx(end + 0.5)
        assert not audio[round(end * SAMPLE_RATE) : round(start * SAMPLE_RATE)].any()  # the gap is silent
    assert spans[-1][2] == pytest.approx(audio.size / SAMPLE_RATE)


# ---- errors: an AudioError (exit code 2, HTTP 400 on field "file") that names the file ------------------------


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    tone = encode(sine(440, SAMPLE_RATE), SAMPLE_RATE, "WAV", "PCM_16")
    flac = encode(sine(440, SAMPLE_RATE), SAMPLE_RATE, "FLAC", "PCM_16")
    files = {
        "notes.txt": (b"Remember to buy milk.\n" * 20, "not an audio file"),
        "blank.wav": (b"", "empty"),
        "silence.wav": (encode(np.zeros(0, np.float32), SAMPLE_RATE, "WAV", "PCM_16"), "empty (0 samples)"),
        "half.wav": (tone[: len(tone) // 2], "truncated"),
        "header_only.wav": (tone[:44], "truncated"),
        "cut_header.wav": (tone[:40], "truncated"),
        "half.flac": (flac[: len(flac) // 2], "truncated"),
        "codec.wav": (wav_with_format_tag(0x1234), "unsupported sample format (WAV codec 0x1234, 16-bit)"),
        "nan.wav": (encode(np.full(100, np.nan, np.float32), SAMPLE_RATE, "WAV", "FLOAT"), "NaN"),
    }
    out = {}
    for name, (data, words) in files.items():
        (tmp_path / name).write_bytes(data)
        out[name] = (tmp_path / name, words)
    return out


@pytest.mark.parametrize(
    "name",
    ["notes.txt", "blank.wav", "silence.wav", "half.wav", "header_only.wav", "cut_header.wav", "half.flac",
     "codec.wav", "nan.wav"],
)  # fmt: skip
def test_bad_files_raise_audio_error_naming_the_file(tmp_path, name):
    path, words = _bad_inputs(tmp_path)[name]
    with pytest.raises(AudioError) as path_error:
        load_audio(path)
    with pytest.raises(AudioError) as bytes_error:
        load_audio(path.read_bytes(), filename=name)
    for error, shown in ((path_error.value, str(path)), (bytes_error.value, name)):
        message = str(error)
        assert message.startswith(f"{shown}: ") and words in message, message
        assert "_io.BytesIO" not in message  # soundfile's own wording never stands in for ours
        assert isinstance(error, InputError) and error.exit_code == 2 and error.param == "file"


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(AudioError, match=r"nowhere\.wav: no such audio file"):
        load_audio(tmp_path / "nowhere.wav")
    with pytest.raises(AudioError, match="is a directory"):
        load_audio(tmp_path)


def test_upload_without_a_filename_is_called_uploaded_audio():
    with pytest.raises(AudioError, match="^uploaded audio: "):
        load_audio(b"not audio at all")


# ---- ffmpeg fallback ----------------------------------------------------------------------------------------

# The smallest MP4/M4A start: an 'ftyp' box, then an 'mdat' with nothing playable. libsndfile does not read MP4.
M4A_BYTES = (
    struct.pack(">I", 24)
    + b"ftypM4A "
    + b"\0\0\0\0"
    + b"M4A isom"
    + struct.pack(">I", 16)
    + b"mdat"
    + bytes(8)
)


def test_without_ffmpeg_other_containers_name_ffmpeg_and_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    (tmp_path / "empty-bin").mkdir()
    (tmp_path / "talk.m4a").write_bytes(M4A_BYTES)
    with pytest.raises(AudioError) as error:
        load_audio(tmp_path / "talk.m4a")
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'talk.m4a'}: ") and "install ffmpeg" in message, message
    with pytest.raises(AudioError, match=r"^meeting\.m4a: .*install ffmpeg"):
        load_audio(M4A_BYTES, filename="meeting.m4a")


needs_ffmpeg = pytest.mark.skipif(
    shutil.which("ffmpeg") is None,
    reason="no ffmpeg on PATH (apt-get install ffmpeg to run the fallback test)",
)


@needs_ffmpeg
def test_ffmpeg_decodes_containers_soundfile_cannot(tmp_path):
    left = sine(440, 44100, 2.0)
    stereo = np.stack(
        [left, np.zeros_like(left)], axis=1
    )  # (samples, 2): averaged, not ffmpeg's 0.707 weights
    soundfile.write(tmp_path / "tone.wav", stereo, 44100)
    cmd = ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(tmp_path / "tone.wav"), "-c:a", "aac"]
    subprocess.run([*cmd, "-b:a", "128k", str(tmp_path / "tone.m4a")], check=True)
    for got in (
        load_audio(tmp_path / "tone.m4a"),
        load_audio((tmp_path / "tone.m4a").read_bytes(), filename="x.m4a"),
    ):
        assert got.dtype == np.float32
        assert abs(got.size - 2 * SAMPLE_RATE) < 0.1 * SAMPLE_RATE  # AAC priming and padding
        assert abs(dominant_hz(got, SAMPLE_RATE) - 440) <= 1
        assert rms(got[4000:-4000]) == pytest.approx(0.25 / np.sqrt(2), rel=0.05)


@needs_ffmpeg
def test_ffmpeg_failure_still_names_the_file(tmp_path):
    (tmp_path / "talk.m4a").write_bytes(M4A_BYTES)
    with pytest.raises(AudioError, match=r"talk\.m4a: not an audio file .*ffmpeg cannot decode it either"):
        load_audio(tmp_path / "talk.m4a")
