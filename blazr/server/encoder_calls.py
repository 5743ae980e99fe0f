"""Calls into an encoder model (blazr.tasks.embed.Embedder behind an EmbedWorker) shared by the embedding and
rerank routes of every API family: inputs are checked and tokenized on the event loop, the forward pass runs
on the model's worker thread, batched with other requests' inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blazr.engine.async_engine import EngineStoppedError
from blazr.server.errors import ApiError
from blazr.server.state import LoadedModel


async def encoder_vectors(
    model: LoadedModel,
    inputs: Sequence[str | Sequence[int]],
    *,
    dimensions: int | None = None,
    truncate: bool = True,
    direction: str = "right",
    prompt_name: str | None = None,
) -> tuple[np.ndarray, int]:
    """((N, D) vectors as the model's sentence-transformers pipeline makes them, tokens used)."""
    embedder = model.llm
    ids, skip = embedder.prepare(inputs, prompt_name, None, dimensions, truncate, direction)
    vectors = await _on_worker(model.engine.embed(ids, skip))  # (N, D)
    return embedder.shorten(vectors, dimensions), sum(len(x) for x in ids)


async def encoder_scores(
    model: LoadedModel, query: str, documents: list[str], truncate: bool, raw_scores: bool = False
) -> tuple[np.ndarray, int]:
    """((N,) relevance of each document: a cross-encoder's score, or a bi-encoder's cosine), tokens used)."""
    embedder = model.llm
    if model.task == "embed":
        vectors, tokens = await encoder_vectors(model, [query, *documents], truncate=truncate)
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)  # (1 + N, D)
        return unit[1:] @ unit[0], tokens
    scores = await _on_worker(
        model.engine.run(lambda: embedder.rerank(query, documents, truncate, raw_scores))
    )
    tokens = sum(len(x) for x in embedder.tokenize([query, *documents], truncate=True))
    return scores, tokens


async def _on_worker(call):
    try:
        return await call
    except EngineStoppedError:
        raise ApiError(
            503, "the model was unloaded during the request; retry", headers={"Retry-After": "1"}
        ) from None
