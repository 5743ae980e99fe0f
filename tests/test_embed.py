"""The embed task against sentence-transformers: tiny random encoders (tests/tiny_encoders.py) written as
model directories, run through blazr on every backend, compared with the vectors and scores in
tests/golden/encoders/ (made by tests/parity/make_encoder_reference.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blazr.errors import InputError, UnsupportedError
from blazr.tasks.embed import Embedder
from tests.tiny_encoders import EMBEDDERS, QUERY, RERANKERS, SENTENCES, write_case

GOLDEN = Path(__file__).parent / "golden" / "encoders"
COSINE = 0.99999  # the issue's bar for vectors against sentence-transformers'


@pytest.fixture(scope="session")
def case_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    return {case: write_case(case, root) for case in (*EMBEDDERS, *RERANKERS)}


def golden(case: str) -> dict:
    with np.load(GOLDEN / f"{case}.npz", allow_pickle=True) as data:
        return {k: data[k] for k in data.files}


def assert_vectors(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == np.float32
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cos.min() >= COSINE, cos
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", EMBEDDERS)
def test_vectors_equal_sentence_transformers(backend, case_dirs, case):
    want = golden(case)
    model = Embedder.load(case_dirs[case], device=backend)
    assert model.max_seq_length == int(want["max_seq_length"])
    ids = model.tokenize(list(SENTENCES))
    assert [list(x) for x in want["ids"]] == ids  # the same tokens, truncation included
    assert_vectors(model.embed(list(SENTENCES)), want["vectors"])
    if "query_vectors" in want:
        assert_vectors(model.embed(list(SENTENCES), prompt_name="query"), want["query_vectors"])
    if "vectors_16" in want:
        assert_vectors(model.embed(list(SENTENCES), dimensions=16), want["vectors_16"])


@pytest.mark.parametrize("case", RERANKERS)
def test_reranker_scores_equal_sentence_transformers(backend, case_dirs, case):
    want = golden(case)
    model = Embedder.load(case_dirs[case], device=backend)
    assert model.task == "rerank"
    np.testing.assert_allclose(model.rerank(QUERY, list(SENTENCES)), want["scores"], atol=1e-4)
    np.testing.assert_allclose(
        model.rerank(QUERY, list(SENTENCES), raw_scores=True), want["logits"], atol=1e-4
    )


def test_a_packed_batch_equals_each_input_alone(case_dirs):
    """Several batches of mixed lengths (a 40-token budget splits the nine inputs) give what each gives alone,
    up to float32 rounding of matmuls over other row counts; a leak between sequences would move values by ~0.1."""
    model = Embedder.load(case_dirs["bert_cls_max_dense"], max_batch_tokens=40)
    batch = model.embed(list(SENTENCES))
    for i, sentence in enumerate(SENTENCES):
        np.testing.assert_allclose(model.embed([sentence])[0], batch[i], rtol=1e-5, atol=1e-5)


def test_token_id_inputs_are_used_as_given(case_dirs):
    model = Embedder.load(case_dirs["bert_mean_normalize"])
    ids = model.tokenize(["A man is eating food."])
    np.testing.assert_array_equal(model.embed(ids), model.embed(["A man is eating food."]))


def test_left_truncation_keeps_the_end(case_dirs):
    model = Embedder.load(case_dirs["bert_mean_normalize"])
    long = SENTENCES[-1]
    right, left = model.tokenize([long])[0], model.tokenize([long], direction="left")[0]
    assert len(right) == len(left) == model.max_seq_length
    assert right[0] == left[0] == 2 and right[-1] == left[-1] == 3  # [CLS] ... [SEP] kept
    assert right[1:-1] != left[1:-1]


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda m: m.embed([]), "input"),
        (lambda m: m.embed(["fine", ""]), "input"),
        (lambda m: m.embed("a string, not a list"), "input"),
        (lambda m: m.embed([[1, 2, 99999]]), "input"),
        (lambda m: m.embed([[]]), "input"),
        (lambda m: m.embed(["x"], dimensions=65), "dimensions"),
        (lambda m: m.embed(["x"], dimensions=0), "dimensions"),
        (lambda m: m.embed([SENTENCES[-1]], truncate=False), "input"),
        (lambda m: m.embed(["x"], truncation_direction="middle"), "truncation_direction"),
        (lambda m: m.embed(["x"], prompt_name="nope"), "prompt_name"),
        (lambda m: m.rerank("q", []), "documents"),
    ],
)
def test_bad_input_names_the_field(case_dirs, call, param):
    model = Embedder.load(case_dirs["bert_mean_normalize"])
    with pytest.raises(InputError) as err:
        call(model)
    assert err.value.param == param


def test_a_reranker_gives_no_embeddings(case_dirs):
    model = Embedder.load(case_dirs["bert_reranker"])
    with pytest.raises(UnsupportedError, match="reranker"):
        model.embed(["x"])


def test_a_bi_encoder_reranks_by_cosine(case_dirs):
    model = Embedder.load(case_dirs["bert_mean_normalize"])
    vectors = model.embed([QUERY, *SENTENCES[:3]])
    np.testing.assert_allclose(model.rerank(QUERY, list(SENTENCES[:3])), vectors[1:] @ vectors[0], atol=1e-6)
