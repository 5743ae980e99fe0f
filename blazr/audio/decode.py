"""`load_audio`: a file path or an uploaded file's bytes -> float32 mono samples at the rate a model wants.

libsndfile (through soundfile) reads WAV, FLAC, OGG and MP3 in-process; anything else (mp4, m4a, webm, ...) goes
to an `ffmpeg` binary when one is on PATH. Every failure is an AudioError (an InputError: exit code 2 on the CLI,
400 in the server) that names the file, including a missing file: it is bad input, not a missing model."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile
import soxr

from blazr.audio.ffmpeg import FfmpegFailed, ffmpeg_decode, ffmpeg_path
from blazr.audio.mel import SAMPLE_RATE
from blazr.audio.wav_header import WavHeader, read_wav_header
from blazr.errors import AudioError

# Enough of a file to reach a WAV's 'data' chunk past any LIST/bext/iXML metadata chunks before it.
_HEADER_BYTES = 1 << 16
# libsndfile's code for "Format not recognised": the input is not a format it knows at all.
_SF_UNRECOGNISED = 1
# WAV codecs besides PCM (1) and IEEE float (3) are compressed ones: when libsndfile refuses a WAV of another
# codec, name the codec rather than call the file malformed.
_WAV_PLAIN_TAGS = (1, 3)
NATIVE_FORMATS = "WAV, FLAC, OGG and MP3"


def load_audio(
    source: str | os.PathLike | bytes, sample_rate: int = SAMPLE_RATE, filename: str | None = None
) -> np.ndarray:
    """Decode `source` to float32 mono (samples,) at `sample_rate`: channels averaged, resampled with soxr
    (high quality) when the file's rate differs. `source` is a path, or the bytes of a whole file (an upload),
    with `filename` naming it in messages and giving ffmpeg its extension."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data: Path | bytes = bytes(source)
        name = filename or "uploaded audio"
    else:
        data = Path(source)
        name = os.fspath(source)
        _check_readable(data, name)
    decoded, rate = _decode(data, name, _safe_suffix(filename or name))  # (samples, channels)
    if decoded.shape[0] == 0:
        raise AudioError(f"{name}: the audio is empty (0 samples)")
    if not np.isfinite(decoded).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    mono = decoded.mean(axis=1, dtype=np.float32) if decoded.shape[1] > 1 else decoded[:, 0]  # (samples,)
    if rate != sample_rate:
        mono = soxr.resample(np.ascontiguousarray(mono), rate, sample_rate, quality="HQ")  # (samples',)
    return np.ascontiguousarray(mono, dtype=np.float32)


def load_audio_channels(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Decode the file at `path` as recorded: float32 (samples, channels) at the file's own sample rate, for
    measures that need every channel at the rate it was made (loudness, peaks, clipping). The same checks and
    AudioErrors as load_audio."""
    data, name = Path(path), os.fspath(path)
    _check_readable(data, name)
    decoded, rate = _decode(data, name, _safe_suffix(name))  # (samples, channels)
    if decoded.shape[0] == 0:
        raise AudioError(f"{name}: the audio is empty (0 samples)")
    if not np.isfinite(decoded).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    return np.ascontiguousarray(decoded, dtype=np.float32), rate


def _check_readable(path: Path, name: str) -> None:
    if not path.exists():
        raise AudioError(f"{name}: no such audio file")
    if path.is_dir():
        raise AudioError(f"{name}: is a directory, not an audio file")
    if not os.access(path, os.R_OK):
        raise AudioError(f"{name}: the audio file cannot be read (permission denied)")


def _safe_suffix(name: str) -> str:
    """The extension ffmpeg's temp file gets, limited to plain characters: it is only a hint to the demuxer."""
    suffix = Path(name).suffix
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""


def _head(data: Path | bytes) -> tuple[bytes, int]:
    if isinstance(data, bytes):
        return data[:_HEADER_BYTES], len(data)
    with open(data, "rb") as f:
        return f.read(_HEADER_BYTES), data.stat().st_size


def _decode(data: Path | bytes, name: str, suffix: str) -> tuple[np.ndarray, int]:
    """The file's samples as float32 (samples, channels) and its sample rate."""
    head, size = _head(data)
    if size == 0:
        raise AudioError(f"{name}: the file is empty (0 bytes)")
    wav = read_wav_header(head, size)
    if wav is not None and wav.truncated:
        held = (
            "it ends inside its header"
            if wav.data_declared is None
            else f"it holds {wav.data_present} of the {wav.data_declared} bytes of samples its header gives"
        )
        raise AudioError(f"{name}: the WAV file is truncated ({held})")

    try:
        return _read_soundfile(io.BytesIO(data) if isinstance(data, bytes) else data, name)
    except _SoundfileRefused as e:
        return _via_ffmpeg(data, name, suffix, _why_unreadable(e.__cause__, wav))


class _SoundfileRefused(Exception):
    """libsndfile could not open the file at all (its error is the __cause__): time to ask ffmpeg."""


def _read_soundfile(source: BinaryIO | Path, name: str) -> tuple[np.ndarray, int]:
    try:
        sound = soundfile.SoundFile(source)
    except (soundfile.SoundFileError, RuntimeError, TypeError, ValueError) as e:  # TypeError: a ".raw" name
        raise _SoundfileRefused() from e
    with sound:
        frames, rate, kind = sound.frames, sound.samplerate, sound.format
        try:
            decoded = sound.read(dtype="float32", always_2d=True)  # (samples, channels)
        except (soundfile.SoundFileError, RuntimeError) as e:
            raise AudioError(f"{name}: the {kind} file is truncated or corrupt ({_sf_reason(e)})") from None
    # MP3 lengths are estimates from the first frame; every other format libsndfile reads records its length
    if kind != "MP3" and decoded.shape[0] < frames:
        raise AudioError(
            f"{name}: the {kind} file is truncated ({decoded.shape[0]} of the {frames} samples its header gives)"
        )
    return decoded, rate


def _via_ffmpeg(data: Path | bytes, name: str, suffix: str, why: str) -> tuple[np.ndarray, int]:
    if ffmpeg_path() is None:
        raise AudioError(
            f"{name}: {why}. blazr reads {NATIVE_FORMATS} itself; for other formats (mp4, m4a, webm, ...) "
            "install ffmpeg and put it on PATH"
        )
    try:
        return ffmpeg_decode(data, suffix)
    except FfmpegFailed as e:
        raise AudioError(f"{name}: {why}, and ffmpeg cannot decode it either ({e})") from None


def _why_unreadable(error: BaseException | None, wav: WavHeader | None) -> str:
    """What to tell the user when libsndfile refuses a file, in place of its bare error text."""
    if wav is not None and wav.format_tag is not None and wav.format_tag not in _WAV_PLAIN_TAGS:
        return f"unsupported sample format (WAV codec 0x{wav.format_tag:04x}, {wav.bits_per_sample}-bit)"
    if isinstance(
        error, TypeError
    ):  # soundfile takes a ".raw" name for headerless samples it needs a rate for
        return "headerless raw audio: its sample rate and sample format are unknown"
    if getattr(error, "code", None) == _SF_UNRECOGNISED:
        return "not an audio file blazr can read"
    return f"cannot decode the audio ({_sf_reason(error)})"


def _sf_reason(error: Exception) -> str:
    """libsndfile's own words without soundfile's "Error opening <_io.BytesIO object at 0x...>" prefix."""
    reason = getattr(error, "error_string", None) or str(error)
    return reason.strip().rstrip(".") or type(error).__name__
