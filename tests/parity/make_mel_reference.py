"""Write tests/golden/whisper/log_mel.npz: openai-whisper's own log_mel_spectrogram of committed speech clips,
which tests/test_audio.py compares blazr.audio's numpy version against.

Needs torch (the .venv-parity of tests/parity/README.md, plus soundfile) and openai-whisper's sdist, fetched with
its hash pinned (models.md §2):

    echo "openai-whisper==20250625 --hash=sha256:37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96" > req.txt
    python3 -m pip download --no-deps --no-binary=:all: --require-hashes -r req.txt --dest dl
    tar xzf dl/openai_whisper-20250625.tar.gz -C dl
    .venv-parity/bin/python tests/parity/make_mel_reference.py --whisper-src dl/openai_whisper-20250625

Only `whisper/audio.py` (and the `exact_div` of `whisper/utils.py` it imports) is loaded, by path: the package's
__init__ would pull in tiktoken, numba and the model code, none of which the mel front end uses.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

import numpy as np
import soundfile
import torch

ROOT = Path(__file__).resolve().parents[2]
SPEECH_DIR = ROOT / "tests" / "data" / "speech"
OUT = ROOT / "tests" / "golden" / "whisper" / "log_mel.npz"

# (name, clip, first sample, end sample, n_mels, padding). Lengths are not multiples of the hop, so the frame
# count rule (n // 160) is exercised; the padded case is what Whisper feeds its encoder for a short utterance.
CASES = (
    ("speech_80", 0, 0, 32077, 80, 0),
    ("speech_128", 0, 0, 32077, 128, 0),
    ("short_padded_80", 7, 0, 16111, 80, 480000),
)


def load_whisper_audio(whisper_src: Path) -> types.ModuleType:
    """Import `whisper.audio` from the extracted sdist without running `whisper/__init__.py`."""
    package = types.ModuleType("whisper")
    package.__path__ = [str(whisper_src / "whisper")]
    sys.modules["whisper"] = package
    return importlib.import_module("whisper.audio")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--whisper-src", type=Path, required=True, help="the extracted openai_whisper-20250625"
    )
    args = parser.parse_args()
    whisper_audio = load_whisper_audio(args.whisper_src)
    torch.set_num_threads(1)  # one thread: the same float32 summation order on every machine

    arrays: dict[str, np.ndarray] = {}
    for name, clip, start, stop, n_mels, padding in CASES:
        audio, rate = soundfile.read(SPEECH_DIR / f"{clip:02d}.flac", dtype="float32")  # (samples,)
        assert rate == whisper_audio.SAMPLE_RATE
        segment = np.ascontiguousarray(audio[start:stop])  # (stop - start,)
        log_mel = whisper_audio.log_mel_spectrogram(torch.from_numpy(segment), n_mels, padding=padding)
        arrays[name] = log_mel.numpy().astype(np.float32)  # (n_mels, frames)
        arrays[f"{name}_input"] = np.array([clip, start, stop, n_mels, padding], dtype=np.int64)
        print(f"{name}: clip {clip:02d}[{start}:{stop}] n_mels {n_mels} padding {padding} -> {log_mel.shape}")
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} B) with torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
