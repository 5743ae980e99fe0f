"""Make tests/golden/decoder_embed/<case>.npz: sentence-transformers' vectors of the tiny decoder embedders and
transformers' yes/no scores of the tiny decoder reranker (tests/tiny_decoder_embedders.py).

Needs torch, transformers and sentence-transformers (not needed by CI); see tests/parity/README.md. From the
repo root:
    .venv-parity/bin/python tests/parity/make_decoder_embed_reference.py [CASE ...]
With --llama-cpp DIR (llama.cpp's source, as for make_encoder_gguf.py) it also converts the last-token embedder
with llama.cpp's own converter to tests/golden/gguf/qwen3_embed_lasttoken_{f32,f16}.gguf (the converter writes
qwen3.pooling_type from the directory's modules.json and add_eos_token from its tokenizer; the tiny byte-level
BPE gets the pre-tokenizer name "qwen2") and writes decoder_embed/gguf_pipeline.npz: what the GGUF alone gives,
inputs cut at its context length (512, not the directory's 64) and unit vectors. It converts the reranker too,
to qwen3_reranker_{f32,f16}.gguf, from a directory named qwen3-reranker (the converter tells a Qwen3-Reranker by
its name, README or architecture): pooling type RANK, the LM head cut to its "yes" and "no" rows (cls.output);
its reference is qwen3_reranker.npz's scores.
The reranker is scored as Qwen3-Reranker's model card does: prefix tokens + the tokenized pair text + suffix
tokens, logits of "no" and "yes" at the last position, p(yes) from their softmax. Each pair runs alone (no
padding); the script checks that the model card's left-padded batch gives the same scores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from blazr.tasks import decoder_rerank as dr  # noqa: E402  (the template strings, nothing computed)
from tests.tiny_decoder_embedders import CASES, EMBEDDERS, write_case  # noqa: E402
from tests.tiny_encoders import QUERY, SENTENCES  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "decoder_embed"
INSTRUCTION = "Find the sentence about food"  # a custom instruction, besides the default one
MAX_LENGTH = 512  # the tiny model's positions: what blazr takes as its limit


def objects(rows) -> np.ndarray:
    out = np.empty(len(rows), dtype=object)
    out[:] = [np.asarray(r, dtype=np.int32) for r in rows]
    return out


@torch.no_grad()
def embedder(root: Path) -> dict[str, np.ndarray]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(root), device="cpu")
    enc = model.tokenizer(list(SENTENCES), truncation=True, max_length=model.max_seq_length)
    return {
        "vectors": model.encode(list(SENTENCES), convert_to_numpy=True),
        "query_vectors": model.encode(list(SENTENCES), prompt_name="query", convert_to_numpy=True),
        "ids": objects(enc["input_ids"]),
        "max_seq_length": np.int32(model.max_seq_length),
    }


@torch.no_grad()
def reranker(root: Path) -> dict[str, np.ndarray]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(root), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(root), dtype=torch.float32).eval()
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    prefix = tokenizer.encode(dr.PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(dr.SUFFIX, add_special_tokens=False)
    out: dict[str, np.ndarray] = {}
    for key, instruction in (("", dr.DEFAULT_INSTRUCTION), ("instruction_", INSTRUCTION)):
        texts = [dr.PAIR.format(instruction=instruction, query=QUERY, document=d) for d in SENTENCES]
        enc = tokenizer(texts, truncation="longest_first", max_length=MAX_LENGTH - len(prefix) - len(suffix))
        ids = [prefix + x + suffix for x in enc["input_ids"]]
        pairs = []
        for row in ids:  # alone: no padding
            logits = model(torch.tensor([row])).logits[0, -1].double()  # (V,)
            pairs.append(torch.stack([logits[no], logits[yes]]))
        two = torch.stack(pairs)  # (N, 2) logits of [no, yes]
        scores = torch.log_softmax(two, 1)[:, 1].exp().numpy()  # (N,) p(yes)
        margin = (two[:, 1] - two[:, 0]).numpy()  # (N,) log p(yes) - log p(no)
        padded = tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        last = model(**padded).logits[:, -1]  # (N, V) the model card's batch, left-padded
        card = torch.log_softmax(torch.stack([last[:, no], last[:, yes]], 1), 1)[:, 1].exp().numpy()
        assert np.abs(card - scores).max() < 1e-5, (card, scores)
        out |= {
            key + "ids": objects(ids),
            key + "scores": scores.astype(np.float32),
            key + "margins": margin.astype(np.float32),
        }
    return out


@torch.no_grad()
def gguf_files(llama_cpp: Path) -> None:
    """The converted last-token embedder and gguf_pipeline.npz (see the module docstring)."""
    from sentence_transformers import SentenceTransformer

    from tests.parity.make_encoder_gguf import convert

    sys.path[1:1] = [str(llama_cpp), str(llama_cpp / "gguf-py")]
    converter = f"llama.cpp convert_hf_to_gguf.py from {llama_cpp.parents[1].name or llama_cpp}"
    out_dir = REPO / "tests" / "golden" / "gguf"
    with tempfile.TemporaryDirectory() as tmp:
        root = write_case("qwen3_embed_lasttoken", Path(tmp))
        for outtype in ("f32", "f16"):
            out = out_dir / f"qwen3_embed_lasttoken_{outtype}.gguf"
            convert(root, out, outtype, converter, pre="qwen2")
            print(f"{out.relative_to(REPO)}: {out.stat().st_size} bytes")
        reranker = write_case("qwen3_reranker", Path(tmp))
        named = reranker.rename(reranker.parent / "qwen3-reranker")  # the name the converter looks for
        for outtype in ("f32", "f16"):
            out = out_dir / f"qwen3_reranker_{outtype}.gguf"
            convert(named, out, outtype, converter, pre="qwen2")
            print(f"{out.relative_to(REPO)}: {out.stat().st_size} bytes")
        model = SentenceTransformer(str(root), device="cpu")
        model.max_seq_length = MAX_LENGTH
        enc = model.tokenizer(list(SENTENCES), truncation=True, max_length=MAX_LENGTH)
        data = {
            "vectors": model.encode(list(SENTENCES), normalize_embeddings=True, convert_to_numpy=True),
            "ids": objects(enc["input_ids"]),
        }
    np.savez(GOLDEN / "gguf_pipeline.npz", allow_pickle=True, **data)
    print("gguf_pipeline", {k: v.shape for k, v in data.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, help="llama.cpp source dir: also make the GGUF files")
    parser.add_argument("cases", nargs="*", help=f"default: {', '.join(CASES)}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    if args.llama_cpp is not None:
        gguf_files(args.llama_cpp)
        if not args.cases:
            return
    for case in args.cases or list(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            root = write_case(case, Path(tmp))
            data = embedder(root) if case in EMBEDDERS else reranker(root)
        np.savez(GOLDEN / f"{case}.npz", allow_pickle=True, **data)
        print(case, {k: getattr(v, "shape", v) for k, v in data.items()})


if __name__ == "__main__":
    main()
