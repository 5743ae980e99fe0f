"""Make tests/golden/gguf/<case>_<f32|f16>.gguf: tiny BERT encoders of tests/tiny_encoders.py converted by
llama.cpp's own convert_hf_to_gguf.py, vocabulary included (the cases have a real WordPiece tokenizer), so the
GGUF embedding tests read files the way users get them.

Needs torch and transformers (the converter imports them) and llama.cpp's converter, as make_gguf.py does:
    .venv-parity/bin/python tests/parity/make_encoder_gguf.py \\
        --llama-cpp /tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp [CASE ...]
    .venv-parity/bin/python tests/parity/make_encoder_gguf.py --llama-cpp ... \\
        --model ~/.cache/blazr-test-models/all-MiniLM-L6-v2 --outtype q8_0 --out /tmp/all-minilm-l6-v2-q8_0.gguf

One step is ours: the converter names the pre-tokenizer by hashing the ids of a fixed text and refuses vocabularies
it has no hash for, which the tiny vocabulary is; it gets "jina-v2-en", the name the converter gives
all-MiniLM-L6-v2's (llama.cpp's WordPiece tokenizer does not read it).

It also writes tests/golden/encoders/gguf_pipeline.npz, what a GGUF alone (no modules.json beside it) should give
where that differs from the sentence-transformers directory: inputs are cut at the context length (64 here, not
the directory's max_seq_length 32), and a reranker has no pooler, which the converter drops (llama.cpp scores
classifier(first token)); both computed by sentence-transformers / transformers from the original weights.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = REPO / "tests" / "golden" / "gguf"
CASES = ("bert_mean_normalize", "bert_reranker")
OUTTYPES = ("f32", "f16")
QUANTIZED = {"bert_mean_normalize": ("q8_0",)}  # also a packed file, for the packed-weight path
PIPELINE = REPO / "tests" / "golden" / "encoders" / "gguf_pipeline.npz"
TINY_PRE = "jina-v2-en"


def convert(hf_dir: Path, out: Path, outtype: str, converter: str, tiny: bool) -> None:
    import gguf  # llama.cpp's gguf-py (put first on sys.path by main)
    import torch
    from conversion import get_model_architecture, get_model_class
    from conversion.base import ModelBase, ModelType, TextModel

    hparams = ModelBase.load_hparams(hf_dir, False)
    model_class = get_model_class(get_model_architecture(hparams, ModelType.TEXT))
    if tiny:  # on the base class: the converter forbids subclasses without model_arch
        TextModel.get_vocab_base_pre = lambda self, tokenizer: TINY_PRE
    ftype = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }[outtype]
    with torch.inference_mode():
        model = model_class(hf_dir, ftype, out, model_name=hf_dir.name, eager=True)
        model.gguf_writer.add_string("blazr.converter", converter)
        model.write()


def main() -> None:
    from tests.tiny_encoders import write_case

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source dir")
    parser.add_argument("--model", type=Path, help="convert this HF directory instead of the tiny cases")
    parser.add_argument("--outtype", default="f16", choices=("f32", "f16", "q8_0"), help="with --model")
    parser.add_argument("--out", type=Path, help="with --model: the GGUF to write")
    parser.add_argument("cases", nargs="*", help=f"default: {', '.join(CASES)}")
    args = parser.parse_args()
    sys.path[1:1] = [str(args.llama_cpp), str(args.llama_cpp / "gguf-py")]
    converter = f"llama.cpp convert_hf_to_gguf.py from {args.llama_cpp.parents[1].name or args.llama_cpp}"
    if args.model is not None:
        convert(args.model.expanduser(), args.out, args.outtype, converter, tiny=False)
        print(f"{args.out}: {args.out.stat().st_size} bytes")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases or CASES:
            root = write_case(case, Path(tmp))
            for outtype in OUTTYPES + QUANTIZED.get(case, ()):
                out = OUT / f"{case}_{outtype}.gguf"
                convert(root, out, outtype, converter, tiny=True)
                print(f"{out.relative_to(REPO)}: {out.stat().st_size} bytes")
        reference(Path(tmp))


def _ids(enc) -> np.ndarray:
    out = np.empty(len(enc["input_ids"]), dtype=object)  # (N,) of (n,) int32
    out[:] = [np.asarray(ids, dtype=np.int32) for ids in enc["input_ids"]]
    return out


def reference(tmp: Path) -> None:
    """gguf_pipeline.npz (see the module docstring) from the cases written under tmp."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tests.tiny_encoders import QUERY, SENTENCES, write_case

    torch.set_num_threads(1)
    context = 64  # the cases' max_position_embeddings, the GGUFs' context_length
    st = SentenceTransformer(str(write_case("bert_mean_normalize", tmp)), device="cpu")
    st.max_seq_length = context
    root = write_case("bert_reranker", tmp)
    tokenizer = AutoTokenizer.from_pretrained(str(root), model_max_length=context)
    model = AutoModelForSequenceClassification.from_pretrained(str(root)).eval()
    pairs = tokenizer(
        [QUERY] * len(SENTENCES), list(SENTENCES), truncation=True, padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        first = model.bert(**pairs).last_hidden_state[:, 0]  # (N, D)
        logits = model.classifier(first)[:, 0]  # (N,) the head without its pooler
    data = {
        "vectors": st.encode(list(SENTENCES), convert_to_numpy=True),  # (N, D) unit rows
        "ids": _ids(st.tokenizer(list(SENTENCES), truncation=True, max_length=context)),
        "rerank_logits": logits.numpy().astype(np.float32),
        "rerank_ids": _ids(tokenizer([QUERY] * len(SENTENCES), list(SENTENCES), truncation=True)),
    }
    np.savez(PIPELINE, allow_pickle=True, **data)
    print(PIPELINE.relative_to(REPO), {k: v.shape for k, v in data.items()})


if __name__ == "__main__":
    main()
