"""What drafters hand the scheduler (Draft), the counters they keep (SpecStats), and which sequences may
speculate at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from blazr.engine.request import Request


@dataclass
class Draft:
    """Proposed continuation tokens of one sequence for one step."""

    token_ids: list[int]
    probs: np.ndarray | None = None  # (k, V) float64 draft distributions q, for sampled draft-model drafts


@dataclass
class SpecStats:
    """Speculation counters over all sequences: verification passes, drafted and accepted tokens."""

    verifications: int = 0  # sequence-steps that carried a draft
    drafted: int = 0
    accepted: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        self.verifications += 1
        self.drafted += drafted
        self.accepted += accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_verification(self) -> float:
        """Tokens a speculating sequence gains per forward pass: accepted drafts plus the sampled token."""
        return (self.accepted + self.verifications) / self.verifications if self.verifications else 0.0


class Drafter(Protocol):
    """Proposes up to `max_lens[i]` tokens for each of `requests` (all decoding: their KV holds every token
    but the last). `release` drops a sequence's drafting state (it finished or was preempted)."""

    num_tokens: int  # num_speculative_tokens: the most tokens one draft proposes
    stats: SpecStats

    def propose(self, requests: list[Request], max_lens: list[int]) -> list[Draft]: ...

    def release(self, request: Request) -> None: ...


def may_speculate(request: Request) -> bool:
    """Whether a sequence may run drafts: not when it opted out (params.speculative), nor when constrained
    (its per-token mask depends on each accepted token), nor on llama.cpp's host sampler chain (mirostat's
    running mu would move on rejected draft positions)."""
    from blazr.engine.sampling_chain import needs_chain

    params = request.params
    return getattr(params, "constraint", None) is None and params.speculative and not needs_chain(params)
