"""Speech output: float32 samples -> the bytes of an audio file in one of OpenAI's response formats, chunk by
chunk, so a server can send each sentence as soon as it is spoken.

`open_encoder(fmt, rate)` returns an Encoder: `write(audio)` gives the bytes ready so far, `close()` the rest.
The pieces, joined, are one valid file:

* wav: 16-bit PCM at the voice's rate behind a header whose RIFF and data sizes read 0xFFFFFFFF ("unknown", as
  a streaming writer leaves them; libsndfile, ffmpeg and Python's `wave` read such a file to its end);
* pcm: headerless 16-bit little-endian mono at 24 kHz (OpenAI's documented layout), resampled with soxr;
* mp3: constant-bitrate MPEG layer III by libsndfile's LAME (CBR: the length is found from the size, since the
  Xing header cannot be rewritten once sent);
* opus: Ogg/Opus by libsndfile at 24 kHz (Opus takes only 8/12/16/24/48 kHz), resampled with soxr;
* flac: by libsndfile; sent whole by `close()`: FLAC's STREAMINFO (length, MD5) is written after the last sample
  and libsndfile cannot read a stream without it;
* aac: ADTS from an `ffmpeg` binary on PATH (none: UnsupportedError naming ffmpeg), fed as samples arrive.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import threading

import numpy as np

from blazr.errors import UnsupportedError

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
PCM_RATE = 24000  # OpenAI's pcm: 24 kHz, 16-bit signed little-endian, mono
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_UNKNOWN = 0xFFFFFFFF
_SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "flac": ("FLAC", "PCM_16")}


class Encoder:
    """Turns float32 mono chunks into the bytes of one file; `write` and `close` return what is ready."""

    def __init__(self, fmt: str, rate: int):
        self.format, self.rate = fmt, rate
        self.content_type = CONTENT_TYPES[fmt]

    def write(self, audio: np.ndarray) -> bytes:
        raise NotImplementedError

    def close(self) -> bytes:
        raise NotImplementedError

    def abort(self) -> None:
        """Stop without finishing (the client went away)."""


def open_encoder(fmt: str, rate: int) -> Encoder:
    """An Encoder for `fmt` (one of FORMATS) taking samples at `rate` Hz."""
    if fmt not in FORMATS:
        raise UnsupportedError(f"audio format {fmt!r} is not supported; use one of {', '.join(FORMATS)}")
    if fmt == "wav":
        return _Pcm16(fmt, rate, rate, header=True)
    if fmt == "pcm":
        return _Pcm16(fmt, rate, PCM_RATE, header=False)
    if fmt == "aac":
        return _Ffmpeg(fmt, rate)
    out_rate = rate if fmt != "opus" else next((r for r in OPUS_RATES if r >= rate), 48000)
    return _SoundFile(fmt, rate, out_rate)


def encode(audio: np.ndarray, rate: int, fmt: str) -> bytes:
    """A whole clip as one file's bytes."""
    encoder = open_encoder(fmt, rate)
    return encoder.write(audio) + encoder.close()


def to_pcm16(audio: np.ndarray) -> bytes:
    """float32 in [-1, 1] -> 16-bit little-endian samples (clipped)."""
    scaled = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767.0
    return np.rint(scaled).astype("<i2").tobytes()


def wav_header(rate: int, size: int = _UNKNOWN) -> bytes:
    """A 44-byte RIFF/WAVE header for 16-bit mono PCM; `size` bytes of samples (default: unknown)."""
    riff = _UNKNOWN if size == _UNKNOWN else 36 + size
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", size)


class _Resampler:
    """Chunks at one rate -> the same signal at another, continuous across chunk boundaries (soxr's stream)."""

    def __init__(self, rate: int, out_rate: int):
        import soxr

        self.stream = None if rate == out_rate else soxr.ResampleStream(rate, out_rate, 1, dtype="float32")

    def __call__(self, audio: np.ndarray, last: bool = False) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        return audio if self.stream is None else self.stream.resample_chunk(audio, last=last)


class _Pcm16(Encoder):
    def __init__(self, fmt: str, rate: int, out_rate: int, header: bool):
        super().__init__(fmt, rate)
        self.resample = _Resampler(rate, out_rate)
        self.header = wav_header(out_rate) if header else b""

    def _head(self) -> bytes:
        head, self.header = self.header, b""
        return head

    def write(self, audio: np.ndarray) -> bytes:
        return self._head() + to_pcm16(self.resample(audio))

    def close(self) -> bytes:
        return self._head() + to_pcm16(self.resample(np.zeros(0, np.float32), last=True))


class _Sink(io.RawIOBase):
    """A seekable in-memory file for libsndfile; `take()` hands out the bytes written since the last take.
    A rewrite of bytes already taken (a header patched at close) cannot reach the client and is dropped."""

    def __init__(self):
        super().__init__()
        self.data, self.pos, self.taken = bytearray(), 0, 0

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b) -> int:
        b = bytes(b)
        end = self.pos + len(b)
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[self.pos : end] = b
        self.pos = end
        return len(b)

    def readinto(self, b) -> int:
        n = max(0, min(len(b), len(self.data) - self.pos))
        b[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self.pos, len(self.data))[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def take(self) -> bytes:
        out = bytes(self.data[self.taken :])
        self.taken = len(self.data)
        return out


class _SoundFile(Encoder):
    def __init__(self, fmt: str, rate: int, out_rate: int):
        import soundfile

        super().__init__(fmt, rate)
        self.resample = _Resampler(rate, out_rate)
        self.sink = _Sink()
        self.streams = fmt != "flac"
        container, subtype = _SOUNDFILE[fmt]
        # LAME's constant bitrate (set only beside a compression level: 0.4 is 96 kbit/s for 22.05 kHz mono)
        kwargs = {"compression_level": 0.4, "bitrate_mode": "CONSTANT"} if fmt == "mp3" else {}
        try:
            self.file = soundfile.SoundFile(self.sink, "w", out_rate, 1, subtype, format=container, **kwargs)
        except TypeError:  # soundfile < 0.13 has no bitrate_mode: LAME's default
            self.file = soundfile.SoundFile(self.sink, "w", out_rate, 1, subtype, format=container)

    def write(self, audio: np.ndarray) -> bytes:
        samples = self.resample(audio)
        if len(samples):
            self.file.write(samples)
        return self.sink.take() if self.streams else b""

    def close(self) -> bytes:
        samples = self.resample(np.zeros(0, np.float32), last=True)
        if len(samples):
            self.file.write(samples)
        self.file.close()
        return self.sink.take()


def ffmpeg_binary() -> str | None:
    return shutil.which("ffmpeg")


class _Ffmpeg(Encoder):
    """ffmpeg reading 16-bit PCM on stdin and writing ADTS AAC on stdout; a thread drains stdout so a long
    sentence cannot fill both pipes and stall."""

    def __init__(self, fmt: str, rate: int):
        super().__init__(fmt, rate)
        binary = ffmpeg_binary()
        if binary is None:
            raise UnsupportedError(
                "response_format aac needs an `ffmpeg` binary on the server's PATH (none found); install "
                "ffmpeg or ask for mp3, opus, flac, wav or pcm"
            )
        cmd = [binary, "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "s16le", "-ar", str(rate)]
        cmd += ["-ac", "1", "-i", "pipe:0", "-c:a", "aac", "-f", "adts", "-flush_packets", "1", "pipe:1"]
        self.process = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.out, self.lock = bytearray(), threading.Lock()
        self.reader = threading.Thread(target=self._read, name="blazr-aac", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while chunk := self.process.stdout.read1(65536):
            with self.lock:
                self.out += chunk

    def _take(self) -> bytes:
        with self.lock:
            out = bytes(self.out)
            self.out.clear()
        return out

    def write(self, audio: np.ndarray) -> bytes:
        self.process.stdin.write(to_pcm16(audio))
        self.process.stdin.flush()
        return self._take()

    def close(self) -> bytes:
        self.process.stdin.close()
        self.reader.join()
        error = self.process.stderr.read().decode(errors="replace").strip()
        if self.process.wait() != 0:
            raise RuntimeError(f"ffmpeg could not encode aac: {error.splitlines()[-1] if error else '?'}")
        return self._take()

    def abort(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
