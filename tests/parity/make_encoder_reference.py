"""Make tests/golden/encoders/<case>.npz: sentence-transformers' vectors and scores for the tiny encoders.

Needs torch and sentence-transformers (not needed by CI); see tests/parity/README.md. Run from the repo root:
    .venv-parity/bin/python tests/parity/make_encoder_reference.py [CASE ...]
Each case of tests/tiny_encoders.py is written as a model directory and loaded by sentence-transformers as a
user would load it; the golden file holds its token ids and float32 outputs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.tiny_encoders import CASES, QUERY, RERANKERS, SENTENCES, write_case  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "encoders"


def token_ids(tokenizer, texts, pairs=None) -> np.ndarray:
    """(N,) object array of each input's token ids, as the model's own tokenizer gives them."""
    enc = tokenizer(list(texts), pairs, truncation=True, max_length=tokenizer.model_max_length)
    out = np.empty(len(enc["input_ids"]), dtype=object)
    out[:] = [np.asarray(ids, dtype=np.int32) for ids in enc["input_ids"]]
    return out


@torch.no_grad()
def reference(case: str, root: Path) -> dict[str, np.ndarray]:
    from sentence_transformers import CrossEncoder, SentenceTransformer

    if case in RERANKERS:
        model = CrossEncoder(str(root), device="cpu", max_length=32)
        pairs = [(QUERY, s) for s in SENTENCES]
        scores = model.predict(pairs, activation_fn=torch.nn.Sigmoid(), convert_to_numpy=True)
        logits = model.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        ids = token_ids(model.tokenizer, [QUERY] * len(SENTENCES), list(SENTENCES))
        return {"scores": scores.astype(np.float32), "logits": logits.astype(np.float32), "ids": ids}
    model = SentenceTransformer(str(root), device="cpu")
    out = {
        "vectors": model.encode(list(SENTENCES), convert_to_numpy=True),
        "ids": token_ids(model.tokenizer, SENTENCES),
        "max_seq_length": np.int32(model.max_seq_length),
    }
    if model.prompts:
        out["query_vectors"] = model.encode(list(SENTENCES), prompt_name="query", convert_to_numpy=True)
    if case == "bert_mean_normalize":  # Matryoshka: the first 16 values, renormalised (as OpenAI gives them)
        out["vectors_16"] = model.encode(
            list(SENTENCES), truncate_dim=16, normalize_embeddings=True, convert_to_numpy=True
        )
    return out


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for case in names or list(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            data = reference(case, write_case(case, Path(tmp)))
        np.savez(GOLDEN / f"{case}.npz", allow_pickle=True, **data)
        print(case, {k: getattr(v, "shape", v) for k, v in data.items()})


if __name__ == "__main__":
    main(sys.argv[1:])
