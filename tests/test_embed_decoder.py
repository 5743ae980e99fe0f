"""Decoder embedders (Qwen3-Embedding style: last-token or mean pooling over a causal decoder, prompts) against
sentence-transformers, and a decoder reranker (Qwen3-Reranker style: P("yes") at the end of a chat prompt)
against transformers, on every backend. The tiny models are tests/tiny_decoder_embedders.py; the golden files
come from tests/parity/make_decoder_embed_reference.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blazr
from blazr.errors import CheckpointError, InputError, UnsupportedError
from blazr.loaders import load_checkpoint
from blazr.models import build_model, model_task
from blazr.tasks import decoder_rerank
from blazr.tasks.embed import Embedder
from tests.test_cli import models, run_cli  # noqa: F401 (models: a fixture)
from tests.test_embed import assert_vectors
from tests.tiny_decoder_embedders import CASES, EMBEDDERS, write_case
from tests.tiny_encoders import QUERY, SENTENCES

GOLDEN = Path(__file__).parent / "golden" / "decoder_embed"
INSTRUCTION = "Find the sentence about food"  # as make_decoder_embed_reference.py
SCORE_ATOL = 1e-4  # P("yes") against transformers'
MARGIN_ATOL = 5e-4  # logit differences of up to ~8: float32 rounding of the head's dot products


@pytest.fixture(scope="session")
def case_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoder_embedders")
    return {case: write_case(case, root) for case in CASES}


def golden(case: str) -> dict:
    with np.load(GOLDEN / f"{case}.npz", allow_pickle=True) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("case", EMBEDDERS)
def test_vectors_equal_sentence_transformers(backend, case_dirs, case):
    want = golden(case)
    model = Embedder.load(case_dirs[case], device=backend)
    assert model.task == "embed" and model.is_decoder
    assert model.max_seq_length == int(want["max_seq_length"])
    # the tokenizer's post-processor appends <|endoftext|>, truncation keeps it: the same ids
    assert model.tokenize(list(SENTENCES)) == [list(x) for x in want["ids"]]
    assert_vectors(model.embed(list(SENTENCES)), want["vectors"])
    assert_vectors(model.embed(list(SENTENCES), prompt_name="query"), want["query_vectors"])


def test_reranker_scores_equal_transformers(backend, case_dirs):
    want = golden("qwen3_reranker")
    model = Embedder.load(case_dirs["qwen3_reranker"], device=backend, task="rerank")
    assert model.task == "rerank" and model.is_decoder
    ids = decoder_rerank.pair_ids(model, QUERY, SENTENCES, None, True)
    assert ids == [list(x) for x in want["ids"]]  # prefix + pair text + suffix, as the model card joins them
    np.testing.assert_allclose(model.rerank(QUERY, list(SENTENCES)), want["scores"], atol=SCORE_ATOL)
    raw = model.rerank(QUERY, list(SENTENCES), raw_scores=True)
    np.testing.assert_allclose(raw, want["margins"], atol=MARGIN_ATOL)
    custom = model.rerank(QUERY, list(SENTENCES), instruction=INSTRUCTION)
    np.testing.assert_allclose(custom, want["instruction_scores"], atol=SCORE_ATOL)


def test_a_packed_batch_equals_each_input_alone(case_dirs):
    """A 40-token budget splits the nine inputs into several packed batches of mixed lengths; each vector is
    what the input gives alone (the last real token of each sequence is pooled, no attention across them)."""
    model = Embedder.load(case_dirs["qwen3_embed_lasttoken"], max_batch_tokens=40)
    batch = model.embed(list(SENTENCES))
    for i, sentence in enumerate(SENTENCES):
        np.testing.assert_allclose(model.embed([sentence])[0], batch[i], rtol=1e-5, atol=1e-5)
    reranker = Embedder.load(case_dirs["qwen3_reranker"], task="rerank", max_batch_tokens=400)
    scores = reranker.rerank(QUERY, list(SENTENCES), raw_scores=True)
    alone = [reranker.rerank(QUERY, [s], raw_scores=True)[0] for s in SENTENCES]
    np.testing.assert_allclose(alone, scores, atol=1e-4)


def test_modules_json_with_pooling_makes_a_decoder_an_embedder(case_dirs):
    embedder, reranker = case_dirs["qwen3_embed_lasttoken"], case_dirs["qwen3_reranker"]
    ckpt = load_checkpoint(embedder)
    assert model_task(ckpt.config, None, ckpt.directory) == "embed"
    assert model_task(ckpt.config) == "generate"  # without the directory: the config alone says causal LM
    ckpt = load_checkpoint(reranker)
    assert model_task(ckpt.config, None, ckpt.directory) == "generate"
    assert isinstance(blazr.load(str(embedder)), Embedder)
    loaded = blazr.load(str(reranker), task="rerank")
    assert isinstance(loaded, Embedder) and loaded.task == "rerank"


def test_the_missing_lm_head_is_only_forgiven_when_embedding(case_dirs):
    ckpt = load_checkpoint(case_dirs["qwen3_embed_lasttoken"])  # bare Qwen3Model names, untied, no lm_head
    from blazr.backends import get_backend

    with pytest.raises(CheckpointError, match="lm_head"):
        build_model(ckpt, get_backend("cpu"))
    model = build_model(ckpt, get_backend("cpu"), lm_head=False)
    assert model.lm_head is None and model.hidden_size == 64


def test_a_causal_lm_is_a_reranker_only_when_asked(case_dirs):
    with pytest.raises(UnsupportedError, match="task='rerank'"):
        Embedder.load(case_dirs["qwen3_reranker"])
    with pytest.raises(UnsupportedError, match="'embed'"):
        Embedder.load(case_dirs["qwen3_embed_lasttoken"], task="rerank")
    with pytest.raises(InputError):
        Embedder.load(case_dirs["qwen3_reranker"], task="generate")


def test_a_decoder_reranker_gives_no_embeddings_and_an_embedder_takes_no_instruction(case_dirs):
    reranker = Embedder.load(case_dirs["qwen3_reranker"], task="rerank")
    with pytest.raises(UnsupportedError, match="reranker"):
        reranker.embed(["x"])
    embedder = Embedder.load(case_dirs["qwen3_embed_lasttoken"])
    with pytest.raises(InputError) as err:
        embedder.rerank(QUERY, ["x"], instruction="find it")
    assert err.value.param == "instruction"
    vectors = embedder.embed([QUERY, "x"])  # a bi-encoder reranks by cosine
    np.testing.assert_allclose(embedder.rerank(QUERY, ["x"]), vectors[1:] @ vectors[0], atol=1e-6)


def test_the_cli_reranks_with_a_causal_lm_given_task_rerank(models):  # noqa: F811
    write_case("qwen3_reranker", models)
    docs = "\n".join(SENTENCES[:8])
    result = run_cli("rerank", QUERY, "-m", "qwen3_reranker", "--task", "rerank", input=docs)
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    want = golden("qwen3_reranker")["scores"][:8]
    assert [r["index"] for r in rows] == np.argsort(-want, kind="stable").tolist()
    np.testing.assert_allclose([r["score"] for r in rows], np.sort(want)[::-1], atol=1e-4)
    plain = run_cli("rerank", QUERY, "-m", "qwen3_reranker", input=docs)  # without --task: not an encoder
    assert plain.exit_code != 0 and "task='rerank'" in plain.stderr


def test_the_server_loads_a_causal_lm_as_a_reranker_when_its_task_says_so(case_dirs):
    from blazr.config import Settings
    from blazr.server.state import load_for_serving

    settings = Settings()
    settings.set("inference.task", "rerank", "test")
    loaded = load_for_serving(case_dirs["qwen3_reranker"], settings)
    assert isinstance(loaded, Embedder) and loaded.task == "rerank"
    np.testing.assert_allclose(
        loaded.rerank(QUERY, list(SENTENCES)), golden("qwen3_reranker")["scores"], atol=SCORE_ATOL
    )


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_a_gguf_decoder_embedder_embeds_as_its_pooling_type_says(backend, outtype):
    """llama.cpp's converter writes the last-token embedder as a plain qwen3 GGUF with qwen3.pooling_type 3
    (from modules.json) and add_eos_token (from the tokenizer): alone, it is an embedder with last-token
    pooling, unit vectors, <|endoftext|> appended, inputs cut at its context length (512)."""
    gguf = Path(__file__).parent / "golden" / "gguf" / f"qwen3_embed_lasttoken_{outtype}.gguf"
    with np.load(GOLDEN / "gguf_pipeline.npz", allow_pickle=True) as data:
        want = {k: data[k] for k in data.files}
    ckpt = load_checkpoint(gguf)
    assert model_task(ckpt.config, ckpt.gguf_metadata, ckpt.directory) == "embed"
    model = blazr.load(gguf, device=backend)
    assert isinstance(model, Embedder) and model.modules.pooling == ("lasttoken",) and model.modules.normalize
    assert model.tokenize(list(SENTENCES)) == [list(x) for x in want["ids"]]
    got = model.embed(list(SENTENCES))  # (9, 64)
    cos = (
        (got * want["vectors"]).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want["vectors"], axis=1)
    )
    assert cos.min() >= (0.99999 if outtype == "f32" else 0.9999), cos


def test_a_gguf_pooling_type_of_none_stays_a_text_generator(tmp_path):
    """pooling_type 0 (llama.cpp's NONE) and no pooling key: a causal LM, as before."""
    from blazr.models import model_task as task

    meta = {"general.architecture": "qwen3"}
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
    assert task(config, meta) == "generate"
    assert task(config, meta | {"qwen3.pooling_type": 0}) == "generate"
    assert task(config, meta | {"qwen3.pooling_type": 1}) == "embed"


def test_the_cli_passes_an_instruction_to_a_decoder_reranker(models):  # noqa: F811
    write_case("qwen3_reranker", models)
    docs = "\n".join(SENTENCES)
    args = ("rerank", QUERY, "-m", "qwen3_reranker", "--task", "rerank", "--instruction", INSTRUCTION)
    result = run_cli(*args, input=docs)
    assert result.exit_code == 0, result.stderr
    rows = sorted((json.loads(line) for line in result.stdout.splitlines()), key=lambda r: r["index"])
    np.testing.assert_allclose(
        [r["score"] for r in rows], golden("qwen3_reranker")["instruction_scores"], atol=1e-4
    )


# a RANK GGUF's F16 weights (every matrix rounded, head rows included) move P("yes") by up to 2.9e-3 from
# transformers' float32 (measured on cpu and cpu-numpy); F32 files are held to the SafeTensors bound
RANK_ATOL = {"f32": SCORE_ATOL, "f16": 5e-3}


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_a_rank_gguf_reranks_with_its_yes_no_rows(backend, outtype):
    """llama.cpp's converter writes Qwen3-Reranker with pooling type RANK and the LM head cut to the "yes" and
    "no" rows (cls.output): alone, it is a reranker (no task asked), P("yes") as transformers gives it, the
    instruction as the model card's."""
    gguf = Path(__file__).parent / "golden" / "gguf" / f"qwen3_reranker_{outtype}.gguf"
    want = golden("qwen3_reranker")
    model = Embedder.load(gguf, device=backend)
    assert model.task == "rerank" and model.rank_head is not None
    ids = decoder_rerank.pair_ids(model, QUERY, list(SENTENCES), None, True)
    assert ids == [list(x) for x in want["ids"]]
    np.testing.assert_allclose(model.rerank(QUERY, list(SENTENCES)), want["scores"], atol=RANK_ATOL[outtype])
    got = model.rerank(QUERY, list(SENTENCES), instruction=INSTRUCTION)
    np.testing.assert_allclose(got, want["instruction_scores"], atol=RANK_ATOL[outtype])
    with pytest.raises(UnsupportedError, match="reranker"):
        model.embed(["a sentence"])


def test_a_rank_gguf_must_name_its_rows():
    """Labels other than yes/no leave the rows unnamed: a CheckpointError naming the key."""
    import dataclasses

    ckpt = load_checkpoint(Path(__file__).parent / "golden" / "gguf" / "qwen3_reranker_f32.gguf")
    meta = dict(ckpt.gguf_metadata, **{"qwen3.classifier.output_labels": ["LABEL_0", "LABEL_1"]})
    with pytest.raises(CheckpointError, match="output_labels"):
        decoder_rerank.gguf_rank_head(dataclasses.replace(ckpt, gguf_metadata=meta))
    assert model_task(ckpt.config, ckpt.gguf_metadata, ckpt.directory) == "rerank"
