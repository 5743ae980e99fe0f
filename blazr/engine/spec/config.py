"""Engine settings for speculative decoding, checked, and the drafter they select."""

from __future__ import annotations

from typing import Any

from blazr.backends.base import Backend
from blazr.engine.block_pool import blocks_needed
from blazr.engine.spec.draft import Drafter
from blazr.errors import ConfigError

METHODS = ("ngram", "draft")


def build_drafter(
    speculative: str | None,
    num_tokens: int,
    lookup_min: int,
    lookup_max: int,
    draft_model: Any,
    backend: Backend,
    target: Any,
    pool: tuple[int, int, int, int],
) -> Drafter | None:
    """The drafter for `speculative` ("ngram", "draft" or None; a draft model alone implies "draft").
    pool is (target pool blocks, block size, max_seqs, num_ctx): the draft cache gets as many blocks plus room
    for each sequence's drafts."""
    if speculative is None and draft_model is not None:
        speculative = "draft"
    if speculative is None:
        return None
    if speculative not in METHODS:
        raise ConfigError(f"speculative={speculative!r} is not a method; use one of {', '.join(METHODS)}")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 1 <= num_tokens <= 32:
        raise ConfigError(f"num_speculative_tokens={num_tokens!r} is out of range; it must be in [1, 32]")
    if speculative == "ngram":
        if not 1 <= lookup_min <= lookup_max:
            raise ConfigError(
                f"prompt_lookup_min={lookup_min} and prompt_lookup_max={lookup_max}: "
                "they must satisfy 1 <= prompt_lookup_min <= prompt_lookup_max"
            )
        from blazr.engine.spec.ngram import PromptLookupDrafter

        return PromptLookupDrafter(num_tokens, lookup_min, lookup_max)
    return _draft_model_drafter(draft_model, backend, target, num_tokens, pool)


def _draft_model_drafter(
    draft_model: Any, backend: Backend, target: Any, num_tokens: int, pool: tuple[int, int, int, int]
) -> Drafter:
    if draft_model is None:
        raise ConfigError("speculative='draft' needs a draft model (draft_model=, or --draft-model PATH)")
    if draft_model.args.vocab_size != target.args.vocab_size:
        raise ConfigError(
            f"the draft model's vocabulary has {draft_model.args.vocab_size} tokens but the model's has "
            f"{target.args.vocab_size}; a draft model must share the model's tokenizer"
        )
    num_blocks, block_size, max_seqs, num_ctx = pool
    if draft_model.args.max_position_embeddings < num_ctx:
        raise ConfigError(
            f"the draft model handles {draft_model.args.max_position_embeddings} positions but num_ctx={num_ctx}; "
            "lower num_ctx or use a draft model with a longer context"
        )
    from blazr.engine.spec.draft_model import DraftModelDrafter

    extra = max_seqs * blocks_needed(num_tokens, block_size)
    return DraftModelDrafter(draft_model, backend, num_blocks + extra, block_size, num_tokens)
