"""Make tests/golden/whisper/faster_whisper_tiny_en.json: faster-whisper's transcripts of the committed speech
set (tests/data/speech) with the real whisper tiny.en, the CTranslate2 directory blazr pulls for the catalog
name `whisper-tiny.en` (same files, checked by sha256), so tests/test_whisper_real.py can hold blazr's word
error rate to faster-whisper's on the same weights and audio.

    .venv-parity/bin/pip install --no-deps faster-whisper==1.2.1 && .venv-parity/bin/pip install av
    .venv-parity/bin/python tests/parity/make_whisper_faster_reference.py [--no-openai]

(faster-whisper imports `av` at module level; its onnxruntime pin is only for the VAD, which is off here.)

faster-whisper runs CTranslate2 on the CPU with compute_type float32 (the float16 weights widened), beam 5,
language "en", vad_filter=False and its defaults otherwise (temperature fallback 0.0-1.0, best_of 5,
condition_on_previous_text, compression-ratio 2.4 / log-prob -1.0 / no-speech 0.6 thresholds). It
transcribes each of the 20 clips and the long-form recordings of LONG_FORMS (the set with 1 s gaps, 77.8 s;
twice over with 2 s gaps, 195.6 s, the issue's 3-minute file; once with 6.5 s gaps, 182.3 s). openai-whisper
runs the same weights (read by blazr's CTranslate2 reader, renamed to its module names) with the same options
in float32, as a second opinion; --no-openai skips it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests import speech_set  # noqa: E402
from tests.wer import word_errors  # noqa: E402

OUT = REPO / "tests" / "golden" / "whisper" / "faster_whisper_tiny_en.json"
MODEL = "whisper-tiny.en"
# the long-form recordings, (passes over the 20 clips, seconds of silence between clips): `long_form_3min` is
# the 3-minute file, the set twice with 2 s gaps (195.6 s); `long_silences_3min` reaches 3 minutes
# with 6.5 s gaps instead, where tiny.en's timestamps drift by seconds (recorded, not asserted on)
LONG_FORMS = {"long_form_1s": (1, 1.0), "long_form_3min": (2, 2.0), "long_silences_3min": (1, 6.5)}


def recording(passes: int, gap: float) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """The speech set `passes` times over with `gap` seconds of silence between clips (speech_set.long_form
    repeated): float32 (samples,) at 16 kHz and each sentence's (text, start_s, end_s)."""
    one, spans = speech_set.long_form(gap)  # (samples,)
    silence = np.zeros(round(gap * speech_set.RATE), dtype=np.float32)  # (gap,)
    pieces, all_spans = [], []
    for p in range(passes):
        offset = p * (one.size + silence.size) / speech_set.RATE
        pieces += [silence, one] if p else [one]
        all_spans += [(text, start + offset, end + offset) for text, start, end in spans]
    return np.concatenate(pieces), all_spans


def score(texts: list[str]) -> dict:
    """Word errors per clip and overall against sentences.txt (tests/wer.py's normaliser)."""
    pairs = [word_errors(ref, hyp) for ref, hyp in zip(speech_set.sentences(), texts, strict=True)]
    errors, words = sum(e for e, _ in pairs), sum(n for _, n in pairs)
    return {"errors": [e for e, _ in pairs], "words": [n for _, n in pairs], "wer": errors / words}


def run_faster_whisper(directory: Path) -> tuple[dict, dict]:
    import ctranslate2
    import faster_whisper
    from faster_whisper import WhisperModel

    # one thread: the reference does not depend on how a parallel reduction splits
    model = WhisperModel(str(directory), device="cpu", compute_type="float32", cpu_threads=1)

    def transcribe(audio: np.ndarray) -> list[dict]:
        segments, _ = model.transcribe(audio, beam_size=5, language="en", vad_filter=False)
        return [{"start": s.start, "end": s.end, "text": s.text} for s in segments]

    out = clips_and_long_forms(transcribe)
    about = {
        "faster_whisper": faster_whisper.__version__,
        "ctranslate2": ctranslate2.__version__,
        "compute_type": "float32",
        "options": {
            "beam_size": 5,
            "language": "en",
            "vad_filter": False,
            "others": "faster-whisper defaults",
        },
    }
    return out, about


def run_openai_whisper(directory: Path) -> tuple[dict, dict]:
    import torch
    import whisper

    from blazr.loaders.whisper_formats import read_whisper_checkpoint
    from tests.parity.openai_whisper_model import openai_whisper_model

    torch.set_num_threads(1)
    config, weights = read_whisper_checkpoint(directory)  # HF names, float16 as stored
    model = openai_whisper_model(config, weights)

    def transcribe(audio: np.ndarray) -> list[dict]:
        result = whisper.transcribe(model, audio, language="en", beam_size=5, fp16=False, verbose=None)
        return [{"start": s["start"], "end": s["end"], "text": s["text"]} for s in result["segments"]]

    out = clips_and_long_forms(transcribe)
    about = {"openai_whisper": whisper.__version__, "torch": torch.__version__, "precision": "float32"}
    return out, about


def clips_and_long_forms(transcribe) -> dict:
    clips = []
    for i in range(len(speech_set.sentences())):
        segments = transcribe(speech_set.load(i))
        clips.append({"text": "".join(s["text"] for s in segments), "segments": segments})
        print(f"{i:2d} {clips[-1]['text']}", flush=True)
    out: dict = {"clips": clips, "score": score([c["text"] for c in clips])}
    for name, (passes, gap) in LONG_FORMS.items():
        audio, spans = recording(passes, gap)
        segments = transcribe(audio)
        out[name] = {
            "passes": passes,
            "seconds_of_silence": gap,
            "duration": audio.size / speech_set.RATE,
            "segments": segments,
        }
        print(f"{name}: {len(segments)} segments for {len(spans)} sentences", flush=True)
    return out


def agreement(a: dict, b: dict) -> dict:
    """Which clips two runtimes transcribed to the same text (before normalising)."""
    same = [x["text"] == y["text"] for x, y in zip(a["clips"], b["clips"], strict=True)]
    return {
        "same_text_clips": sum(same),
        "differing_clips": [i for i, s in enumerate(same) if not s],
        "long_form_same_text": {
            name: [s["text"] for s in a[name]["segments"]] == [s["text"] for s in b[name]["segments"]]
            for name in LONG_FORMS
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-openai", action="store_true", help="skip the openai-whisper second opinion")
    args = ap.parse_args()
    from blazr.loaders.registry import lookup
    from blazr.model_dir import resolve_model

    directory = resolve_model(MODEL)
    golden: dict = {
        "model": MODEL,
        "model_bin_sha256": dict(lookup(MODEL).files)["model.bin"],
        "sentences": list(speech_set.sentences()),
        "wer_rules": "tests/wer.py",
    }
    fw, about = run_faster_whisper(directory)
    golden |= {"faster_whisper": about, **fw}
    print(f"faster-whisper WER {fw['score']['wer']:.4f} {fw['score']['errors']}")
    if not args.no_openai:
        ow, about = run_openai_whisper(directory)
        golden["openai_whisper"] = {**about, **ow, "agreement_with_faster_whisper": agreement(fw, ow)}
        print(f"openai-whisper WER {ow['score']['wer']:.4f} {ow['score']['errors']}")
        print(golden["openai_whisper"]["agreement_with_faster_whisper"])
    OUT.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
