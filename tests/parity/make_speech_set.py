"""Speak tests/data/speech/sentences.txt with espeak-ng into tests/data/speech/NN.flac (16 kHz mono 16-bit).

These clips are the speech the Whisper tests transcribe (word error rate, long-form). espeak-ng is a formant
synthesizer: small, deterministic, and a Debian package (`apt-get install espeak-ng`), so the set can be remade
anywhere; its robotic voice is harder for Whisper than a person, so error thresholds should leave room.

    python tests/parity/make_speech_set.py            # remake every clip
    python tests/parity/make_speech_set.py --check    # only report sizes and durations

espeak-ng writes 22,050 Hz; soxr resamples to 16 kHz. Leading and trailing silence is cut to a short margin so a
clip's span is its speech (tests/speech_set.py places clips on a timeline by those spans).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile
import soxr

SPEECH_DIR = Path(__file__).resolve().parents[1] / "data" / "speech"
RATE = 16000
VOICE = "en-us"
WORDS_PER_MINUTE = 150  # slower than espeak-ng's 175 default: tiny.en's word errors fall from 21% to 16%
MARGIN_S = 0.1  # silence kept before and after the speech
SILENCE_LEVEL = 1e-3  # |sample| below this counts as silence when trimming


def speak(text: str) -> np.ndarray:
    """espeak-ng's rendering of `text`, float32 (samples,) at 16 kHz with its silent ends trimmed."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        cmd = ["espeak-ng", "-v", VOICE, "-s", str(WORDS_PER_MINUTE), "-w", str(wav), text]
        subprocess.run(cmd, check=True, capture_output=True)
        audio, rate = soundfile.read(wav, dtype="float32")  # (samples,)
    audio = soxr.resample(audio, rate, RATE, quality="HQ")  # (samples,)
    loud = np.flatnonzero(np.abs(audio) > SILENCE_LEVEL)
    margin = int(MARGIN_S * RATE)
    return audio[max(0, loud[0] - margin) : loud[-1] + margin + 1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="report the committed clips, write nothing")
    args = parser.parse_args()
    sentences = (SPEECH_DIR / "sentences.txt").read_text().splitlines()
    if not args.check:
        if shutil.which("espeak-ng") is None:
            sys.exit("espeak-ng is not on PATH (Debian/Ubuntu: apt-get install espeak-ng)")
        version = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout.strip()
        print(version)
        for i, text in enumerate(sentences):
            audio = np.clip(speak(text), -1.0, 1.0)  # (samples,)
            path = SPEECH_DIR / f"{i:02d}.flac"
            soundfile.write(path, audio, RATE, format="FLAC", subtype="PCM_16", compression_level=1.0)
    total_bytes = total_s = 0.0
    for i, text in enumerate(sentences):
        path = SPEECH_DIR / f"{i:02d}.flac"
        info = soundfile.info(path)
        total_bytes += path.stat().st_size
        total_s += info.duration
        print(f"{path.name}  {info.duration:5.2f} s  {path.stat().st_size:7d} B  {text}")
    print(f"{len(sentences)} clips, {total_s:.1f} s, {total_bytes / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
