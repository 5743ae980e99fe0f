"""Verification: the target model's logits for the last accepted token and every drafted token of a sequence
come from one forward pass; this turns them into the accepted tokens plus one more.

- Deterministic drafts (prompt lookup, greedy draft model), any temperature: sample every row with the
  ordinary sampler and accept drafts while the sample equals the draft. That is speculative sampling with a
  one-hot q (accept with probability p(d), else draw from p without d), and greedy acceptance is the case
  temperature 0. Each row uses the next uniform of the request's stream and the stream then advances by the
  tokens kept only, so seeded output equals plain seeded decoding.
- Sampled draft-model drafts (q known): accept d with probability min(1, p(d) / q(d)); on rejection draw from
  max(0, p - q); after k acceptances draw a bonus token from p.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from blazr.backends.base import Array, Backend
from blazr.engine.request import Request, TokenLogprob
from blazr.engine.sampling import Sampler, token_logprobs
from blazr.engine.spec.distribution import processed_row, sample_from, sampling_distribution, with_context

Tokens = dict[Request, list[int]]
Logprobs = dict[Request, list[TokenLogprob]]


def draft_of(seq: Any) -> list[int]:
    return seq.draft.token_ids if getattr(seq, "draft", None) is not None else []


class Verifier:
    """Samples and verifies the rows of one step: each sampling sequence has 1 + len(draft) rows, in order."""

    def __init__(self, backend: Backend, sampler: Sampler):
        self.backend = backend
        self.sampler = sampler

    def verify(self, logits: Array, seqs: list[Any]) -> tuple[Tokens, Logprobs]:
        """logits (R, V) for `seqs` (ScheduledSeqs that sample) -> ({sequence: new tokens}, logprobs)."""
        first_rows = np.cumsum([0] + [1 + len(draft_of(s)) for s in seqs])  # (S + 1,)
        sampled = [s.draft is not None and s.draft.probs is not None for s in seqs]
        tokens: Tokens = {}
        logprobs: Logprobs = {}
        host = self.backend.download(logits) if any(sampled) else None  # (R, V)
        plain = [i for i, q in enumerate(sampled) if not q]
        if plain:
            rows = np.concatenate([np.arange(first_rows[i], first_rows[i + 1]) for i in plain])
            part = logits if host is None else self.backend.upload(host[rows], dtype="f32")
            self._verify_one_hot(part, [seqs[i] for i in plain], tokens, logprobs)
        for i in np.nonzero(sampled)[0]:
            seq = seqs[i]
            rows = host[first_rows[i] : first_rows[i + 1]]  # (k + 1, V)
            tokens[seq.request], logprobs[seq.request] = self._verify_sampled(rows, seq.request, seq.draft)
        return tokens, {r: lp for r, lp in logprobs.items() if lp}

    def _verify_one_hot(self, logits: Array, seqs: list[Any], tokens: Tokens, logprobs: Logprobs) -> None:
        """Sample every row; keep the longest prefix where the sample equals the draft, plus one sample."""
        row_requests: list[Request] = []
        for seq in seqs:
            draft = draft_of(seq)
            if not draft:
                row_requests.append(seq.request)
                continue
            stream = copy.deepcopy(seq.request.rng)  # peek the uniforms; the real stream advances later
            row_requests += [with_context(seq.request, draft[:j], stream) for j in range(len(draft) + 1)]
        ids, lps = self.sampler.sample(logits, row_requests)
        row = 0
        for seq in seqs:
            draft = draft_of(seq)
            accepted = 0
            while accepted < len(draft) and ids[row + accepted] == draft[accepted]:
                accepted += 1
            if draft:
                seq.request.rng.random(accepted + 1)  # consume exactly the draws of the tokens kept
            tokens[seq.request] = ids[row : row + accepted + 1]
            logprobs[seq.request] = [lp for lp in lps[row : row + accepted + 1] if lp is not None]
            row += len(draft) + 1

    def _verify_sampled(
        self, rows: np.ndarray, request: Request, draft: Any
    ) -> tuple[list[int], list[TokenLogprob]]:
        """Standard speculative sampling over rows (k + 1, V) with the draft's distributions q (k, V)."""
        out: list[int] = []
        logprobs: list[TokenLogprob] = []
        for j in range(len(draft.token_ids) + 1):
            logits = processed_row(rows[j], request, out)  # (V,) out == the accepted drafts so far
            p = sampling_distribution(logits, request.params)  # (V,)
            token = self._accept_or_resample(p, draft, j, request.rng)
            out.append(token)
            if request.params.logprobs is not None:
                logprobs.append(token_logprobs(logits, token, request.params.logprobs))
            if j == len(draft.token_ids) or token != draft.token_ids[j]:
                break
        return out, logprobs

    @staticmethod
    def _accept_or_resample(p: np.ndarray, draft: Any, j: int, rng: np.random.Generator) -> int:
        """Row j's token: the bonus draw from p after the last draft, else draft j or a residual draw."""
        if j == len(draft.token_ids):
            return sample_from(p, rng.random())
        q, proposed = draft.probs[j], draft.token_ids[j]  # (V,)
        if rng.random() * q[proposed] < p[proposed]:  # accept with probability min(1, p / q)
            return proposed
        residual = np.maximum(p - q, 0.0)  # (V,)
        return sample_from(residual if residual.sum() > 0 else p, rng.random())
