"""A CTranslate2 Whisper model.bin made by CTranslate2's own converter, so blazr's reader is checked against
the real writer and not only against tests/ct2_writer.py.

Run with a Python that has torch, transformers and ctranslate2 (the repo's parity venv, plus
`pip install ctranslate2`):
    python tests/parity/make_whisper_ct2.py
It writes tiny_whisper's "en" checkpoint with its vocabulary cut to the first VOCAB rows (the full 51864-row
table alone would be 1.7 MB even as int8), converts it with `TransformersConverter` and
quantization="int8_float16" (int8 linear and embedding weights with per-row scales, float16 for the rest),
and keeps model.bin and config.json in tests/golden/whisper/ct2_tiny_en/. tests/test_whisper_formats.py
reads them back and compares with tiny_whisper.weights("en") cut the same way.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import tiny_whisper  # noqa: E402

VOCAB = 1024  # rows of the token embedding kept
QUANTIZATION = "int8_float16"
OUT = ROOT / "tests" / "golden" / "whisper" / "ct2_tiny_en"


def cut_checkpoint(directory: Path) -> Path:
    """tiny_whisper "en" with a VOCAB-row embedding, as an HF directory (the test builds the same weights)."""
    import json

    from safetensors.numpy import save_file

    weights = tiny_whisper.weights("en")
    weights["model.decoder.embed_tokens.weight"] = weights["model.decoder.embed_tokens.weight"][:VOCAB]
    config = tiny_whisper.config("en") | dict(
        vocab_size=VOCAB, pad_token_id=VOCAB - 1, bos_token_id=VOCAB - 1
    )
    config |= dict(eos_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 2)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    save_file(weights, str(directory / "model.safetensors"))
    return directory


class _Vocab:
    """Stands in for the tokenizer: the converter only lists its tokens (the checkpoint has none)."""

    additional_special_tokens: list[str] = []

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(VOCAB)}


def main() -> None:
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _Vocab()

    with tempfile.TemporaryDirectory() as tmp:
        source = cut_checkpoint(Path(tmp) / "hf")
        converted = Path(tmp) / "ct2"
        Converter(str(source)).convert(str(converted), quantization=QUANTIZATION)
        OUT.mkdir(parents=True, exist_ok=True)
        for name in ("model.bin", "config.json"):
            shutil.copy(converted / name, OUT / name)
    size = (OUT / "model.bin").stat().st_size
    print(f"ctranslate2 {ctranslate2.__version__}: wrote {OUT / 'model.bin'} ({size} bytes)")


if __name__ == "__main__":
    main()
