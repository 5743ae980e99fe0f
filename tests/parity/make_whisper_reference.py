"""Reference outputs of the tiny random Whisper checkpoints (tests/tiny_whisper.py) from transformers.

Run with a Python that has torch and transformers (the repo's parity venv):
    python tests/parity/make_whisper_reference.py
writes tests/golden/whisper/tiny_<case>.npz: for a fixed random log-mel window (tiny_whisper.random_mel), every 10th row of the
encoder output, and greedy decoding (no token suppressed) of 40 tokens after Whisper's prompt with the
logits of a fixed subset of the vocabulary at every step.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import tiny_whisper  # noqa: E402

STEPS = 40
OUT = ROOT / "tests" / "golden" / "whisper"


def main() -> None:
    from transformers import WhisperForConditionalGeneration

    OUT.mkdir(parents=True, exist_ok=True)
    for case in tiny_whisper.CASES:
        with tempfile.TemporaryDirectory() as tmp:
            model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper.write(case, Path(tmp)))
        model.eval()
        features = torch.from_numpy(tiny_whisper.random_mel(case))[None]
        vocab_subset = np.random.default_rng(3).choice(tiny_whisper.vocab_size(case), 512, replace=False)
        with torch.no_grad():
            encoded = model.model.encoder(features).last_hidden_state  # (1, 1500, D)
            ids, logits = tiny_whisper.prompt(case), []
            for _ in range(STEPS):
                out = model(encoder_outputs=(encoded,), decoder_input_ids=torch.tensor([ids])).logits[0, -1]
                logits.append(out.numpy()[vocab_subset])
                ids.append(int(out.argmax()))
        np.savez_compressed(
            OUT / f"tiny_{case}.npz",
            encoder_rows=encoded[0, ::10].numpy(),
            prompt=np.array(tiny_whisper.prompt(case)),
            ids=np.array(ids[len(tiny_whisper.prompt(case)) :]),
            vocab_subset=vocab_subset,
            logits=np.stack(logits),
        )
        print(case, ids[len(tiny_whisper.prompt(case)) :])


if __name__ == "__main__":
    main()
