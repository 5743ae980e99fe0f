"""Calls into an encoder model (blazr.tasks.embed.Embedder behind an EmbedWorker) shared by the embedding and
rerank routes of every API family: inputs are checked and tokenized on the event loop, the forward pass runs
on the model's worker thread, batched with other requests' inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blazr.engine.async_engine import EngineStoppedError
from blazr.errors import InputError
from blazr.server.errors import ApiError
from blazr.server.state import LoadedModel
from blazr.tasks.embed import unit_rows


async def encoder_vectors(
    model: LoadedModel,
    inputs: Sequence[str | Sequence[int]],
    *,
    dimensions: int | None = None,
    truncate: bool = True,
    direction: str = "right",
    prompt_name: str | None = None,
    normalize: bool | None = None,
    field: str = "input",
) -> tuple[np.ndarray, int]:
    """((N, D) vectors as the model's sentence-transformers pipeline makes them, unit rows when `normalize`
    (default: when the pipeline normalises), tokens used). `field` is the request's name for the inputs."""
    embedder = model.llm
    try:
        ids, skip = embedder.prepare(inputs, prompt_name, None, dimensions, truncate, direction)
    except InputError as error:
        if error.param == "input" and field != "input":  # name the field as this route family spells it
            raise InputError(str(error).replace("input", field, 1), field) from None
        raise
    vectors = await _on_worker(model.engine.embed(ids, skip))  # (N, D) not yet normalised
    normalize = embedder.modules.normalize if normalize is None else normalize
    if normalize:
        vectors = unit_rows(vectors)
    return embedder.shorten(vectors, dimensions, normalize), sum(len(x) for x in ids)


async def encoder_scores(
    model: LoadedModel,
    query: str,
    documents: list[str],
    truncate: bool,
    raw_scores: bool = False,
    field: str = "documents",
    instruction: str | None = None,
) -> tuple[np.ndarray, int]:
    """((N,) relevance of each document: a cross-encoder's score, or a bi-encoder's cosine), tokens used).
    Bad input is a 400 naming `query` or `field` (the request's name for the documents); an `instruction`
    (a decoder reranker's task) for any other model is a 400 naming it."""
    embedder = model.llm
    if instruction is not None and not (embedder.is_decoder and embedder.task == "rerank"):
        raise InputError("instruction is for decoder rerankers (Qwen3-Reranker) only", "instruction")
    if model.task == "embed":
        q_ids, _ = _prepared(embedder, [query], truncate, "query")
        d_ids, _ = _prepared(embedder, documents, truncate, field)
        vectors = unit_rows(await _on_worker(model.engine.embed(q_ids + d_ids)))  # (1 + N, D)
        return vectors[1:] @ vectors[0], sum(len(x) for x in q_ids + d_ids)  # (N,) cosine similarities
    _prepared(embedder, [query], True, "query")  # an empty query is a 400 before any work
    try:
        scores = await _on_worker(
            model.engine.run(lambda: embedder.rerank(query, documents, truncate, raw_scores, instruction))
        )
    except InputError as error:
        raise InputError(str(error).replace("documents", field, 1), field) from None
    tokens = sum(len(x) for x in embedder.tokenize([query, *documents], truncate=True))
    return scores, tokens


def _prepared(embedder, texts: list[str], truncate: bool, field: str):
    """Embedder.prepare, its errors naming the request's field."""
    try:
        return (
            embedder.prepare(texts, truncate=truncate)
            if embedder.task == "embed"
            else (embedder.tokenize(texts, truncate=truncate), None)
        )
    except InputError as error:
        if error.param == "input":
            raise InputError(str(error).replace("input", field, 1), field) from None
        raise


async def _on_worker(call):
    try:
        return await call
    except EngineStoppedError:
        raise ApiError(
            503, "the model was unloaded during the request; retry", headers={"Retry-After": "1"}
        ) from None
