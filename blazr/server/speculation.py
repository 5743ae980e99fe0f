"""Speculative decoding for served models: LLM.load's arguments from the inference.speculative_* settings."""

from __future__ import annotations

from typing import Any

from blazr.config import Settings


def serving_speculation(settings: Settings) -> dict[str, Any]:
    """LLM.load's speculative decoding arguments from inference.speculative_* (empty when off); a draft model
    named by catalog name or file in the model directory is resolved there (never fetched)."""
    inference = settings.inference
    if inference.speculative_method is None and inference.speculative_draft_model is None:
        return {}
    out: dict[str, Any] = {
        "speculative": inference.speculative_method or "draft",
        "num_speculative_tokens": inference.speculative_num_speculative_tokens,
    }
    if inference.speculative_draft_model is not None:
        from blazr.config import resolve_model_dir
        from blazr.model_dir import resolve_model

        directory = resolve_model_dir(settings)
        out["draft_model"] = str(resolve_model(inference.speculative_draft_model, False, directory))
    return out
