"""`blazr embed` and `blazr rerank` with the tiny sentence-transformers encoders of tests/tiny_encoders.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_cli import assert_user_error, models, run_cli  # noqa: F401 (models: a fixture)
from tests.test_embed import golden
from tests.tiny_encoders import QUERY, SENTENCES, write_case


@pytest.fixture
def encoders(models):  # noqa: F811
    for case in ("bert_mean_normalize", "bert_reranker"):
        write_case(case, models)
    return models


def test_embed_prints_one_json_vector_per_stdin_line(encoders):
    result = run_cli("embed", "-m", "bert_mean_normalize", input="\n".join(SENTENCES) + "\n\n")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["index"] for r in rows] == list(range(len(SENTENCES)))  # the blank line is skipped
    want = golden("bert_mean_normalize")["vectors"]
    np.testing.assert_allclose([r["embedding"] for r in rows], want, atol=1e-5)
    short = run_cli("embed", "-m", "bert_mean_normalize", "-t", SENTENCES[0], "--dimensions", "16")
    np.testing.assert_allclose(
        json.loads(short.stdout)["embedding"], golden("bert_mean_normalize")["vectors_16"][0], atol=1e-5
    )


def test_rerank_prints_documents_best_first(encoders):
    result = run_cli("rerank", QUERY, "-m", "bert_reranker", "--top-n", "3", input="\n".join(SENTENCES[:8]))
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    want = golden("bert_reranker")["scores"][:8]
    assert [r["index"] for r in rows] == np.argsort(-want, kind="stable")[:3].tolist()
    assert [r["text"] for r in rows] == [SENTENCES[r["index"]] for r in rows]


@pytest.mark.parametrize(
    "args, stdin, code, phrase",
    [
        (("embed", "-m", "bert_mean_normalize"), "", 2, "no non-empty line"),
        (("embed", "-m", "bert_mean_normalize", "--dimensions", "65", "-t", "x"), None, 2, "dimensions=65"),
        (
            ("embed", "-m", "bert_mean_normalize", "--no-truncate", "-t", SENTENCES[-1]),
            None,
            2,
            "limit of 32",
        ),
        (("embed", "-m", "bert_reranker", "-t", "x"), None, 1, "reranker"),
        (("generate", "-m", "bert_mean_normalize", "-p", "x"), None, 1, "embedding model"),
    ],
)
def test_cli_errors_name_the_problem(encoders, args, stdin, code, phrase):
    assert_user_error(run_cli(*args, input=stdin), code, phrase)
