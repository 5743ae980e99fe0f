"""Make tests/golden/gguf/<model>_<f32|f16>.gguf: the tiny models converted by llama.cpp's own
convert_hf_to_gguf.py, so the GGUF parity tests read files the way users get them, not our imitation.

Needs torch (the converter imports it) and llama.cpp's converter, which the llama-cpp-python sdist vendors:
    .venv-parity/bin/pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcpp
    tar -xzf /tmp/lcpp/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcpp
    .venv-parity/bin/python tests/parity/make_gguf.py \\
        --llama-cpp /tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp [MODEL ...]

The converter's own code writes every tensor and hparam. Only the vocabulary is ours: the tiny models have
no tokenizer, so the converter's set_vocab is replaced by an empty one ("none"); tensors and hparams are
untouched by that. The llama.cpp commit is recorded in each file's general.source.url-free metadata key
"blazr.converter".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = REPO / "tests" / "golden" / "gguf"
OUTTYPES = ("f32", "f16")
# config.json keys the converter reads that transformers 5's to_dict() drops (as llama.cpp read them under
# transformers 4, with which the released GGUF files were made)
V4_ONLY_KEYS = ("rotary_pct", "hybrid_override_pattern")
# keys transformers 5's AutoConfig fills with defaults that a released config.json lacks, and that the converter
# reads as a claim: a Nemotron-H config with num_experts_per_tok is converted as nemotron_h_moe
CONFIG_ONLY_KEYS = ("num_experts_per_tok",)


def convert(llama_cpp: Path, hf_dir: Path, out: Path, outtype: str, converter: str) -> None:
    import gguf  # llama.cpp's gguf-py (put first on sys.path by main)
    import torch
    from conversion import get_model_architecture, get_model_class
    from conversion.base import ModelBase, ModelType

    hparams = ModelBase.load_hparams(hf_dir, False)
    model_class = get_model_class(get_model_architecture(hparams, ModelType.TEXT))

    def empty_vocab(self) -> None:  # the tiny models have no tokenizer
        self.gguf_writer.add_tokenizer_model("none")

    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}[outtype]
    with torch.inference_mode():
        model_class.set_vocab = (
            empty_vocab  # on the class: the converter forbids subclasses without model_arch
        )
        # transformers 5's AutoConfig folds GPT-NeoX's rotary_pct into rope_parameters and Nemotron-H's
        # hybrid_override_pattern into layers_block_type; this converter still reads them (as under transformers
        # 4): give it the config.json values
        raw = json.loads((hf_dir / "config.json").read_text())
        hparams = {k: v for k, v in hparams.items() if k in raw or k not in CONFIG_ONLY_KEYS}
        hparams |= {k: raw[k] for k in V4_ONLY_KEYS if k in raw and k not in hparams}
        model = model_class(hf_dir, ftype, out, model_name="blazr-tiny", eager=True, hparams=hparams)
        model.gguf_writer.add_string("blazr.converter", converter)
        model.write()


def write_vocab_json(hf_dir: Path, vocab_size: int) -> None:
    """A tokenizer.json of vocab_size plain tokens: some converters (Gemma's) count the vocabulary from it to
    drop padding rows of the embeddings; there are none here."""
    vocab = {f"<t{i}>": i for i in range(vocab_size)}
    (hf_dir / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))


def main() -> None:
    from tests.tiny_models import MODELS, tiny_config, write_safetensors

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--llama-cpp", type=Path, required=True, help="llama.cpp source dir (the sdist's vendor/llama.cpp)"
    )
    parser.add_argument("models", nargs="*", help=f"default: all of {', '.join(MODELS)}")
    args = parser.parse_args()
    sys.path[1:1] = [str(args.llama_cpp), str(args.llama_cpp / "gguf-py")]
    converter = f"llama.cpp convert_hf_to_gguf.py from {args.llama_cpp.parents[1].name or args.llama_cpp}"
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.models or MODELS:
        with tempfile.TemporaryDirectory() as tmp:
            write_safetensors(name, tmp, "float32")
            write_vocab_json(Path(tmp), tiny_config(name)["vocab_size"])
            for outtype in OUTTYPES:
                out = OUT / f"{name}_{outtype}.gguf"
                convert(args.llama_cpp, Path(tmp), out, outtype, converter)
                print(f"{out.relative_to(REPO)}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
