"""Make tests/golden/gguf/<case>_<f32|f16>.gguf: tiny encoders of tests/tiny_encoders.py (BERT, RoBERTa,
XLM-RoBERTa, DistilBERT, ModernBERT, NomicBERT; embedders and rerankers) converted by llama.cpp's own
convert_hf_to_gguf.py, vocabulary included (the cases have real tokenizers), so the GGUF embedding tests read
files the way users get them.

Needs torch and transformers (the converter imports them) and llama.cpp's converter, as make_gguf.py does:
    .venv-parity/bin/python tests/parity/make_encoder_gguf.py \\
        --llama-cpp /tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp [CASE ...]
    .venv-parity/bin/python tests/parity/make_encoder_gguf.py --llama-cpp ... \\
        --model ~/.cache/blazr-test-models/all-MiniLM-L6-v2 --outtype q8_0 --out /tmp/all-minilm-l6-v2-q8_0.gguf

Two steps are ours. The converter names the pre-tokenizer by hashing the ids of a fixed text and refuses
vocabularies it has no hash for, which the tiny ones are: a WordPiece one gets "jina-v2-en", the name the
converter gives all-MiniLM-L6-v2's (llama.cpp's WordPiece tokenizer does not read it), RoBERTa's byte-level BPE
"roberta-bpe" (stsb-roberta-base's), ModernBERT's "modern-bert" (ModernBERT-base's). And XLM-RoBERTa's
vocabulary is read from sentencepiece.bpe.model, as xlm-roberta-base, bge-m3 and multilingual-e5 ship it (the
converter's tokenizer.json path wants a top-level Precompiled normalizer the tiny tokenizer.json has not): the
tiny unigram pieces are written as one (needs the sentencepiece and protobuf packages).

The tiny ModernBERT has a WordPiece tokenizer, which llama.cpp's ModernBERT converter writes as a "gpt2" BPE
vocabulary without merges (it warns "output may be non-functional"): its GGUFs carry the weights, not a usable
tokenizer (tests/test_embed_gguf.py says so).

It also writes tests/golden/encoders/gguf_pipeline.npz (BERT) and gguf_families.npz (the others, keys
"<case>.<field>"), what a GGUF alone (no modules.json beside it) should give
where that differs from the sentence-transformers directory: inputs are cut at the context length (64 here, not
the directory's max_seq_length 32), and a reranker has no pooler, which the converter drops (llama.cpp scores
classifier(first token)), and every vector is L2-normalised (llama.cpp's default, whatever the directory's
modules say); all computed by sentence-transformers / transformers from the original weights.
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
CASES = (
    "bert_mean_normalize",
    "bert_reranker",
    "roberta_mean_normalize",
    "roberta_reranker",
    "xlmr_cls",
    "xlmr_reranker",
    "distilbert_mean",
    "distilbert_reranker",
    "modernbert_mean_normalize",
    "modernbert_reranker",
    "nomic_mean_normalize",
)
OUTTYPES = ("f32", "f16")
QUANTIZED = {
    "bert_mean_normalize": ("q8_0",),
    "nomic_mean_normalize": ("q8_0",),
}  # also a packed file, for the packed-weight path
PIPELINE = REPO / "tests" / "golden" / "encoders" / "gguf_pipeline.npz"
FAMILIES = REPO / "tests" / "golden" / "encoders" / "gguf_families.npz"
# the pre-tokenizer name a tiny vocabulary gets, by family (see the module docstring); XLM-R's converter
# writes "default" itself
TINY_PRE = {"roberta": "roberta-bpe", "modernbert": "modern-bert"}
WORDPIECE_PRE = "jina-v2-en"
CONTEXT = 64  # the cases' positions (RoBERTa's after the converter drops its two offset rows): context_length
# NomicBERT's context_length: the tiny config's max_position_embeddings, which the converter reads before the
# hub's n_positions (a hub config has only the latter; for 8192 positions trained to 2048 it writes 2048)
FAMILY_CONTEXT = {"nomic": 8192}


def convert(hf_dir: Path, out: Path, outtype: str, converter: str, pre: str | None) -> None:
    import gguf  # llama.cpp's gguf-py (put first on sys.path by main)
    import torch
    from conversion import get_model_architecture, get_model_class
    from conversion.base import ModelBase, ModelType, TextModel

    hparams = ModelBase.load_hparams(hf_dir, False)
    model_class = get_model_class(get_model_architecture(hparams, ModelType.TEXT))
    if pre is not None:  # on the base class: the converter forbids subclasses without model_arch
        TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
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
        convert(args.model.expanduser(), args.out, args.outtype, converter, pre=None)
        print(f"{args.out}: {args.out.stat().st_size} bytes")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    cases = args.cases or CASES
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            root = write_case(case, Path(tmp))
            family = case.split("_")[0]
            if family == "xlmr":
                write_sentencepiece(root)
            for outtype in OUTTYPES + QUANTIZED.get(case, ()):
                out = OUT / f"{case}_{outtype}.gguf"
                convert(root, out, outtype, converter, TINY_PRE.get(family, WORDPIECE_PRE))
                print(f"{out.relative_to(REPO)}: {out.stat().st_size} bytes")
        if any(case.startswith("bert_") for case in cases):
            reference(Path(tmp))
        if any(not case.startswith("bert_") for case in cases):
            families_reference(Path(tmp), [case for case in cases if not case.startswith("bert_")])


def write_sentencepiece(root: Path) -> None:
    """root/sentencepiece.bpe.model: the tiny XLM-R unigram pieces as a SentencePiece model in fairseq's order
    (<unk> <s> </s> first, the others one id lower than in tokenizer.json, no <pad> or <mask>: the converter
    re-aligns them as transformers does), the identity normalizer (no charsmap), a dummy prefix and extra
    whitespace removed, as XLM-R's own model says."""
    import os

    os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"  # as the converter sets it
    from sentencepiece import sentencepiece_model_pb2 as pb

    from tests.tiny_encoder_families import unigram_vocab

    normal, unknown, control = 1, 2, 3  # SentencePiece piece types
    proto = pb.ModelProto()
    pieces = [("<unk>", 0.0, unknown), ("<s>", 0.0, control), ("</s>", 0.0, control)]
    for piece, score, kind in pieces + [(p, s, normal) for p, s in unigram_vocab()[4:-1]]:
        entry = proto.pieces.add()
        entry.piece, entry.score, entry.type = piece, score, kind
    proto.trainer_spec.model_type = 1  # UNIGRAM
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = 0, 1, 2
    proto.trainer_spec.pad_id = -1
    spec = proto.normalizer_spec
    spec.name, spec.add_dummy_prefix, spec.remove_extra_whitespaces, spec.escape_whitespaces = (
        "identity",
        True,
        True,
        True,
    )
    (root / "sentencepiece.bpe.model").write_bytes(proto.SerializeToString())


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


def families_reference(tmp: Path, cases: list[str]) -> None:
    """gguf_families.npz (see the module docstring) for the non-BERT `cases`, the other cases' fields kept: the
    GGUF keeps every family's whole classification head (RoBERTa's dense + out_proj, DistilBERT's
    pre_classifier, ModernBERT's dense + norm + classifier), so a reranker's logits are transformers' own."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tests.tiny_encoders import QUERY, RERANKERS, SENTENCES, write_case

    torch.set_num_threads(1)
    data = {}
    if FAMILIES.exists():
        with np.load(FAMILIES, allow_pickle=True) as old:
            data = {k: old[k] for k in old.files if k.split(".", 1)[0] not in cases}
    for case in cases:
        root = write_case(case, tmp)
        if case not in RERANKERS:
            context = FAMILY_CONTEXT.get(case.split("_")[0], CONTEXT)
            st = SentenceTransformer(str(root), device="cpu")
            st.max_seq_length = context
            data[f"{case}.vectors"] = st.encode(list(SENTENCES), normalize_embeddings=True)  # (N, D)
            data[f"{case}.ids"] = _ids(st.tokenizer(list(SENTENCES), truncation=True, max_length=context))
            continue
        tokenizer = AutoTokenizer.from_pretrained(str(root), model_max_length=CONTEXT)
        model = AutoModelForSequenceClassification.from_pretrained(str(root)).eval()
        pairs = tokenizer([QUERY] * len(SENTENCES), list(SENTENCES), truncation=True)
        with torch.no_grad():
            batch = tokenizer.pad(pairs, return_tensors="pt")
            data[f"{case}.logits"] = model(**batch).logits[:, 0].numpy().astype(np.float32)  # (N,)
        data[f"{case}.ids"] = _ids(pairs)
    np.savez(FAMILIES, allow_pickle=True, **data)
    print(FAMILIES.relative_to(REPO), {k: v.shape for k, v in data.items()})


if __name__ == "__main__":
    main()
