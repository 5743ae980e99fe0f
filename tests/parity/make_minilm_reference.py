"""Make tests/golden/all_minilm_l6_v2.npz: sentence-transformers' vectors of tests/minilm_sentences.py with the
real all-MiniLM-L6-v2 (the catalog's files, fetched by blazr into the test model cache).

    .venv-parity/bin/python tests/parity/make_minilm_reference.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from blazr.loaders.registry import fetch, lookup  # noqa: E402
from tests.conftest import model_cache_dir  # noqa: E402
from tests.minilm_sentences import PAIRS, SENTENCES  # noqa: E402


def main() -> None:
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    directory = fetch(lookup("all-minilm"), model_cache_dir())
    model = SentenceTransformer(str(directory), device="cpu")
    vectors = model.encode(list(SENTENCES), convert_to_numpy=True, batch_size=8)  # (50, 384) unit rows
    sims = np.array([vectors[i] @ vectors[j] for i, j in PAIRS])  # (P,)
    gaps = np.diff(np.sort(sims))
    print(
        f"pair similarities {sims.min():.3f}..{sims.max():.3f}, smallest gap between ranks {gaps.min():.2e}"
    )
    np.savez(
        REPO / "tests" / "golden" / "all_minilm_l6_v2.npz", vectors=vectors.astype(np.float32), sims=sims
    )


if __name__ == "__main__":
    main()
