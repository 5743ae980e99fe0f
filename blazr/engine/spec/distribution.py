"""Host-side sampling distributions for speculative sampling, which needs the probabilities the sampler draws
from (not just a sampled id): p from the target and q from the draft, both under the request's settings."""

from __future__ import annotations

import dataclasses

import numpy as np

from blazr.engine.request import Request, SamplingParams
from blazr.engine.sampling import needs_processing, process_logits


def with_context(request: Request, draft_ids: list[int], rng: np.random.Generator | None = None) -> Request:
    """A copy of the request as if `draft_ids` were already generated (penalties and masks then see them),
    optionally drawing from `rng` instead of the request's own generator."""
    return dataclasses.replace(
        request, output_ids=request.output_ids + list(draft_ids), rng=rng if rng is not None else request.rng
    )


def processed_row(logits: np.ndarray, request: Request, draft_ids: list[int]) -> np.ndarray:
    """logits (V,) -> float32 logits after the request's processors, with `draft_ids` in the context."""
    if not needs_processing(request.params):
        return np.asarray(logits, dtype=np.float32)
    return process_logits(logits, with_context(request, draft_ids))


def sampling_distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Processed logits (V,) -> (V,) float64 probabilities the backend sampler draws from: temperature, then
    top-k, softmax, top-p and min-p over tokens in descending order (ties by lower id), renormalised.
    Temperature 0 gives the one-hot argmax."""
    vocab = logits.shape[0]
    out = np.zeros(vocab, dtype=np.float64)  # (V,)
    if params.temperature <= 0:
        out[int(np.argmax(logits))] = 1.0
        return out
    scaled = np.asarray(logits, dtype=np.float32) / float(np.float32(params.temperature))  # (V,)
    order = np.argsort(-scaled, kind="stable")  # (V,) descending, ties by lower id
    if 0 < params.top_k < vocab:
        order = order[: params.top_k]
    probs = np.exp(scaled[order].astype(np.float64) - float(scaled[order[0]]))  # (K,)
    probs /= probs.sum()
    keep = len(probs)
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0.0:
        below = np.nonzero(probs < params.min_p * probs[0])[0]
        keep = min(keep, int(below[0])) if len(below) else keep
    out[order[:keep]] = probs[:keep] / probs[:keep].sum()
    return out


def sample_from(probs: np.ndarray, uniform: float) -> int:
    """Inverse-CDF draw from unnormalised non-negative weights (V,) in token-id order."""
    cum = np.cumsum(probs)  # (V,)
    index = int(np.searchsorted(cum, uniform * cum[-1], side="right"))
    return min(index, len(probs) - 1)
