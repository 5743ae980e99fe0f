"""Decode through an `ffmpeg` binary on PATH: the fallback for containers libsndfile does not read (mp4, m4a,
webm, ...). ffmpeg is not a Python dependency; without it those formats give a clear error instead."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile

# A decode that takes longer than this is stuck (a pipe, a network path), not busy.
_TIMEOUT_S = 600


def ffmpeg_path() -> str | None:
    return shutil.which("ffmpeg")


class FfmpegFailed(Exception):
    """ffmpeg ran and could not decode the input; the message is its last line of stderr."""


def ffmpeg_decode(source: Path | bytes, suffix: str = "") -> tuple[np.ndarray, int]:
    """Decode `source` (a path, or a whole file in memory) with ffmpeg to float32 (samples, channels) at its own
    rate; returns (samples, rate). Channels and rate are left alone so the caller downmixes by the mean and
    resamples with soxr exactly as for files soundfile reads (ffmpeg's own `-ac 1` weights stereo by 0.707).
    Bytes go through a temporary file, not a pipe: an mp4 whose index sits at the end cannot be read from one."""
    binary = ffmpeg_path()
    if binary is None:
        raise FileNotFoundError("ffmpeg")
    if isinstance(source, bytes):
        with tempfile.TemporaryDirectory(prefix="blazr-audio-") as tmp:
            path = Path(tmp) / f"input{suffix}"
            path.write_bytes(source)
            return _run(binary, path)
    return _run(binary, Path(source))


def _run(binary: str, path: Path) -> tuple[np.ndarray, int]:
    cmd = [binary, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", os.fspath(path)]
    # a float WAV on stdout: its header carries the channel count and rate (the size fields read "unknown")
    cmd += ["-vn", "-f", "wav", "-acodec", "pcm_f32le", "-"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        raise FfmpegFailed(f"ffmpeg did not finish within {_TIMEOUT_S} s") from e
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        last = lines[-1] if lines else f"ffmpeg exited with status {done.returncode}"
        raise FfmpegFailed(last.replace(f"{os.fspath(path)}: ", ""))  # the caller names the file itself
    try:
        samples, rate = soundfile.read(io.BytesIO(done.stdout), dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError) as e:
        raise FfmpegFailed("ffmpeg produced no audio") from e
    return samples, rate  # (samples, channels)
