"""The real all-MiniLM-L6-v2 (catalog `all-minilm`, its sentence-transformers directory from a registry package)
against sentence-transformers' own vectors of 50 varied sentences (tests/golden/all_minilm_l6_v2.npz, made by
tests/parity/make_minilm_reference.py): cosine >= 0.99999 each, and the same similarity ranking of 25 pairs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import fetch_registry_model
from tests.minilm_sentences import PAIRS, SENTENCES

pytestmark = pytest.mark.registry

GOLDEN = Path(__file__).parent / "golden" / "all_minilm_l6_v2.npz"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return fetch_registry_model("all-minilm")


def test_minilm_equals_sentence_transformers(backend, minilm_dir):
    from blazr.tasks.embed import Embedder

    want = np.load(GOLDEN)
    model = Embedder.load(minilm_dir, device=backend)
    assert (model.dimension, model.max_seq_length) == (384, 256)
    got = model.embed(list(SENTENCES))  # (50, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosine = (got * want["vectors"]).sum(axis=1)
    assert cosine.min() >= 0.99999, (cosine.argmin(), cosine.min())
    sims = np.array([got[i] @ got[j] for i, j in PAIRS])
    np.testing.assert_array_equal(np.argsort(sims), np.argsort(want["sims"]))  # the same STS ranking


def test_minilm_through_blazr_load(minilm_dir):
    import blazr

    model = blazr.load(str(minilm_dir))
    a, b, c = model.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."]
    )
    assert a @ b == pytest.approx(0.7553, abs=1e-3)  # sentence-transformers' value for this pair
    assert a @ c < 0.0


def test_minilm_through_the_openai_sdk(minilm_dir):
    """The 50 sentences through `blazr serve`'s /v1/embeddings with the openai SDK (which asks for base64)."""
    openai = pytest.importorskip("openai")
    from blazr.server.app import create_app
    from tests.server.conftest import run_live_server, server_settings

    app = create_app(server_settings(), model=str(minilm_dir), model_dir=minilm_dir.parent)
    with run_live_server(app) as server:
        sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        result = sdk.embeddings.create(model=minilm_dir.name, input=list(SENTENCES))
    got = np.array([item.embedding for item in result.data], dtype=np.float32)  # (50, 384)
    cosine = (got * np.load(GOLDEN)["vectors"]).sum(axis=1)
    assert cosine.min() >= 0.99999, (cosine.argmin(), cosine.min())
    assert result.usage.prompt_tokens > len(SENTENCES)
