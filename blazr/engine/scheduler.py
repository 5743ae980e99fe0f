"""A simple scheduler (pure Python, no backend): each step either prefills the first waiting request (its
whole prompt, or one chunk of it) or decodes one token for every running request, all in one batch.

The split follows vLLM: `schedule()` says which tokens of which requests run, the runner executes it, and
`update()` applies the sampled tokens, finishing requests on EOS / stop ids / max_tokens / the context limit.
Finished and aborted requests give their KV blocks back at once. New requests join between steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from blazr.engine.kv_cache import BlockPool, OutOfBlocksError
from blazr.engine.request import FinishReason, Request, RequestStatus


@dataclass
class ScheduledSeq:
    """One request's share of a step: `token_ids` go to positions start .. start + len - 1."""

    request: Request
    start: int  # tokens of this request already in the KV cache
    token_ids: list[int]
    block_table: list[int]  # covers start + len(token_ids) tokens
    sample: bool  # whether this step samples the request's next token (false for a non-final prefill chunk)


@dataclass
class ScheduledBatch:
    seqs: list[ScheduledSeq]

    @property
    def num_tokens(self) -> dict[str, int]:
        """{request_id: tokens processed this step}."""
        return {s.request.request_id: len(s.token_ids) for s in self.seqs}

    @property
    def is_prefill(self) -> bool:
        return any(s.request.status is RequestStatus.WAITING for s in self.seqs)


class Scheduler:
    """Owns the waiting queue, the running set and the block pool."""

    def __init__(
        self,
        pool: BlockPool,
        num_ctx: int,
        max_seqs: int,
        eos_ids: frozenset[int] = frozenset(),
        prefill_chunk: int | None = None,
    ):
        self.pool = pool
        self.num_ctx = num_ctx  # prompt + generated tokens of one sequence never exceed this
        self.max_seqs = max_seqs
        self.eos_ids = frozenset(eos_ids)
        self.prefill_chunk = prefill_chunk  # max prompt tokens per prefill step; None: the whole prompt
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def get(self, request_id: str) -> Request | None:
        return next((r for r in (*self.waiting, *self.running) if r.request_id == request_id), None)

    def finish(self, request: Request, reason: FinishReason, stop_reason: str | int | None = None) -> None:
        """End a request now and free its blocks."""
        request.finish(reason, stop_reason)
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.pool.free(request.request_id)

    def abort(self, request_id: str) -> Request | None:
        """Abort a queued or running request; returns it, or None when it is unknown or already finished."""
        request = self.get(request_id)
        if request is not None:
            self.finish(request, FinishReason.ABORT)
        return request

    # ---- schedule ----------------------------------------------------------------------------------------

    def schedule(self) -> ScheduledBatch | None:
        """The next step's work, or None when there is nothing to run."""
        if self.waiting and len(self.running) < self.max_seqs:
            seq = self._schedule_prefill(self.waiting[0])
            if seq is not None:
                return ScheduledBatch([seq])
        if self.running:
            return ScheduledBatch([self._schedule_decode(r) for r in self.running])
        if self.waiting:
            raise OutOfBlocksError(f"KV cache too small for request {self.waiting[0].request_id!r}")
        return None

    def _schedule_prefill(self, request: Request) -> ScheduledSeq | None:
        start = request.num_computed
        end = len(request.prompt_ids)
        if self.prefill_chunk:
            end = min(end, start + self.prefill_chunk)
        if not self.pool.can_allocate(request.request_id, end):
            return None  # wait for running requests to free blocks
        table = self.pool.allocate(request.request_id, end)
        tokens = request.prompt_ids[start:end]
        return ScheduledSeq(request, start, tokens, list(table), sample=end == len(request.prompt_ids))

    def _schedule_decode(self, request: Request) -> ScheduledSeq:
        start = request.num_tokens - 1  # the last sampled token is not in the cache yet
        table = self.pool.allocate(request.request_id, start + 1)
        return ScheduledSeq(request, start, [request.output_ids[-1]], list(table), sample=True)

    # ---- update ------------------------------------------------------------------------------------------

    def update(self, batch: ScheduledBatch, sampled: dict[str, int]) -> list[Request]:
        """Apply one step's result ({request_id: new token}); returns the requests that got a token."""
        advanced = []
        for seq in batch.seqs:
            request = seq.request
            if request.finished:
                continue  # aborted while the step ran
            request.num_computed += len(seq.token_ids)
            if not seq.sample:
                continue
            if request.status is RequestStatus.WAITING:
                self.waiting.remove(request)
                self.running.append(request)
                request.status = RequestStatus.RUNNING
            request.output_ids.append(sampled[request.request_id])
            self._check_token_stop(request)
            advanced.append(request)
        return advanced

    def _check_token_stop(self, request: Request) -> None:
        """EOS (unless ignore_eos) and stop_token_ids end with "stop"; max_tokens and num_ctx, "length"."""
        token = request.output_ids[-1]
        params = request.params
        if token in self.eos_ids and not params.ignore_eos:
            self.finish(request, FinishReason.STOP)
        elif token in params.stop_token_ids:
            self.finish(request, FinishReason.STOP, token)
        elif len(request.output_ids) >= params.max_tokens or request.num_tokens >= self.num_ctx:
            self.finish(request, FinishReason.LENGTH)
