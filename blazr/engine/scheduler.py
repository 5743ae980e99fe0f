"""The continuous-batching scheduler (pure Python, no backend).

Each step mixes decode tokens and prefill chunks of many sequences in one batch, under a token budget: running
sequences first (oldest first), then waiting ones join while the budget, `max_seqs` and the KV pool allow.
A sequence whose next block does not fit preempts the newest running sequence, which gives its blocks back and
is recomputed later (its prompt and generated tokens are prefilled again, often from the prefix cache).

The split follows vLLM: `schedule()` says which tokens of which sequences run, the runner executes it, and
`update()` applies the sampled tokens, finishing sequences on EOS / stop ids / max_tokens / the context limit.
Finished and aborted sequences give their KV blocks back at once; new requests join between steps.

With a drafter (speculative decoding), decoding sequences also run draft tokens with the budget and free blocks
left after normal scheduling; `update()` keeps the accepted ones and frees the blocks of the rest.

A model with state-space layers also needs a state slot per running sequence (blazr.engine.state_pool): taken
when a sequence joins the running set (max_seqs slots, so one is always free then), given back with its blocks.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from blazr.engine.kv_cache import KVCacheManager, OutOfBlocksError
from blazr.engine.prefix_cache import extend_block_keys
from blazr.engine.request import FinishReason, Request, RequestStatus
from blazr.engine.spec.draft import Draft, Drafter, may_speculate
from blazr.engine.state_pool import StatePool
from blazr.errors import BlazrError


class QueueFullError(BlazrError):
    """The engine's waiting queue is at its limit (`max_waiting`); the server answers 429."""


@dataclass
class ScheduledSeq:
    """One sequence's share of a step: `token_ids` go to positions start .. start + len - 1."""

    request: Request
    start: int  # tokens of this sequence already in the KV cache
    token_ids: list[int]
    block_table: list[int]  # covers start + len(token_ids) tokens
    sample: bool  # whether this step samples the next token (false for a non-final prefill chunk)
    draft: Draft | None = None  # speculative tokens, the tail of token_ids; every one of them is verified
    state_slot: int | None = None  # the sequence's recurrent-state slot (models with state-space layers)


@dataclass
class ScheduledBatch:
    seqs: list[ScheduledSeq]
    preempted: list[Request] = field(default_factory=list)  # sent back to the waiting queue this step

    @property
    def num_tokens(self) -> dict[str, int]:
        """{request_id: tokens processed this step} (vLLM's scheduler product)."""
        return {s.request.request_id: len(s.token_ids) for s in self.seqs}


class Scheduler:
    """Owns the waiting queue, the running set and the KV block tables."""

    def __init__(
        self,
        kv: KVCacheManager,
        num_ctx: int,
        max_seqs: int,
        eos_ids: frozenset[int] = frozenset(),
        prefill_chunk: int | None = None,
        max_num_batched_tokens: int = 512,
        max_waiting: int | None = None,
        drafter: Drafter | None = None,
        states: StatePool | None = None,
    ):
        self.kv = kv
        self.num_ctx = num_ctx  # prompt + generated tokens of one sequence never exceed this
        self.max_seqs = max_seqs
        self.eos_ids = frozenset(eos_ids)
        self.prefill_chunk = prefill_chunk  # max tokens of one sequence per step; None: the budget
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_waiting = max_waiting  # None: unbounded
        self.drafter = drafter  # None: no speculative decoding
        self.states = states  # None: the model keeps no per-sequence state (no state-space layers)
        self.waiting: deque[Request] = deque()  # preempted ones go to the front
        self.running: list[Request] = []  # in arrival order
        self.num_preemptions = 0
        self._arrivals = 0

    def check_capacity(self, num_new: int = 1) -> None:
        """Raise QueueFullError when `num_new` more sequences would pass the waiting-queue limit."""
        if self.max_waiting is not None and len(self.waiting) + num_new > self.max_waiting:
            raise QueueFullError(
                f"the engine's waiting queue is full ({len(self.waiting)} of max_waiting={self.max_waiting} "
                "sequences); retry later"
            )

    def add(self, request: Request) -> None:
        request.arrival = self._arrivals
        self._arrivals += 1
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def get(self, request_id: str) -> list[Request]:
        """The unfinished sequences (choices) of a request."""
        return [r for r in (*self.waiting, *self.running) if r.request_id == request_id]

    def finish(self, request: Request, reason: FinishReason, stop_reason: str | int | None = None) -> None:
        """End a sequence now and free its blocks."""
        request.finish(reason, stop_reason)
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self._release(request)

    def abort(self, request_id: str) -> list[Request]:
        """Abort every unfinished choice of a request; returns them (empty when unknown or finished)."""
        requests = self.get(request_id)
        for request in requests:
            self.finish(request, FinishReason.ABORT)
        return requests

    # ---- schedule ----------------------------------------------------------------------------------------

    def schedule(self) -> ScheduledBatch | None:
        """The next step's work, or None when there is nothing to run."""
        batch = ScheduledBatch([])
        budget = self._schedule_running(batch, self.max_num_batched_tokens)
        if not batch.preempted:  # after a preemption the pool is tight: no one new joins this step
            budget = self._schedule_waiting(batch, budget)
        if self.drafter is not None and budget > 0:
            self._schedule_drafts(batch, budget)
        if batch.seqs:
            return batch
        if self.waiting and not self.running:  # an empty pool that cannot take the oldest waiting one
            raise OutOfBlocksError(f"KV cache too small for request {self.waiting[0].request_id!r}")
        return None

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        for request in list(self.running):
            if budget == 0:
                break
            if request.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this loop
            n = self._chunk(request, budget)
            while not self.kv.can_allocate(request, request.num_computed + n):
                victim = max(self.running, key=lambda r: r.arrival)  # the newest; never one scheduled already
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is request:
                    break
            else:
                batch.seqs.append(self._take(request, n))
                budget -= n
        return budget

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> int:
        for request in list(self.waiting):
            if budget == 0 or len(self.running) >= self.max_seqs:
                return budget
            if request.waits_for_leader:
                continue
            if self.states is not None and not self.states.num_free:
                return budget
            self._match_prefix(request)
            n = self._chunk(request, budget)
            if not self.kv.can_allocate(request, request.num_computed + n):
                self.kv.free(request)  # the shared prefix blocks it just took
                request.num_computed = 0
                return budget
            self.waiting.remove(request)
            request.status = RequestStatus.RUNNING
            if self.states is not None:
                self.states.allocate(request)  # starts from a zero state: the sequence's start is 0
            bisect.insort(self.running, request, key=lambda r: r.arrival)
            batch.seqs.append(self._take(request, n))
            budget -= n
        return budget

    def _schedule_drafts(self, batch: ScheduledBatch, budget: int) -> None:
        """Give decoding sequences draft tokens, within the budget and the free blocks left (never preempting).
        Blocks are held for the longest draft allowed, then trimmed to the draft the drafter proposes."""
        chosen: list[tuple[ScheduledSeq, int]] = []
        for seq in batch.seqs:
            room = min(self._draft_room(seq), budget)
            while room > 0 and not self.kv.can_allocate(seq.request, seq.start + 1 + room):
                room -= 1
            if room > 0:
                self.kv.allocate(seq.request, seq.start + 1 + room)
                chosen.append((seq, room))
                budget -= room
        if not chosen:
            return
        drafts = self.drafter.propose([s.request for s, _ in chosen], [room for _, room in chosen])
        for (seq, room), draft in zip(chosen, drafts, strict=True):
            draft.token_ids = draft.token_ids[:room]
            self.kv.truncate(seq.request, seq.start + 1 + len(draft.token_ids))
            seq.block_table = list(self.kv.block_table(seq.request))
            if draft.token_ids:
                seq.token_ids = seq.token_ids + draft.token_ids
                seq.draft = draft

    def _draft_room(self, seq: ScheduledSeq) -> int:
        """How many draft tokens a scheduled sequence may take: 0 unless it decodes its last token; then
        bounded by num_speculative_tokens, max_tokens, num_ctx and prefill_chunk."""
        request = seq.request
        if not seq.sample or seq.start + len(seq.token_ids) != request.num_tokens or len(seq.token_ids) != 1:
            return 0
        if not may_speculate(request):
            return 0
        room = min(
            self.drafter.num_tokens,
            request.params.max_tokens - len(request.output_ids) - 1,  # the verified step adds one more
            self.num_ctx - request.num_tokens,
        )
        return min(room, self.prefill_chunk - 1) if self.prefill_chunk else room

    def _chunk(self, request: Request, budget: int) -> int:
        """Tokens of this sequence to run now: all it has not computed, within the budget and chunk size."""
        n = min(request.num_tokens - request.num_computed, budget)
        return min(n, self.prefill_chunk) if self.prefill_chunk else n

    def _match_prefix(self, request: Request) -> None:
        keys = extend_block_keys(
            request.block_keys,
            request.all_ids,
            self.kv.block_size,
            request.num_tokens // self.kv.block_size,
            request.key_salt,
        )
        request.num_computed = self.kv.match_prefix(request, keys, request.num_tokens)
        if request.num_preemptions == 0:
            request.num_cached_tokens = request.num_computed

    def _take(self, request: Request, n: int) -> ScheduledSeq:
        start = request.num_computed
        table = self.kv.allocate(request, start + n)
        tokens = request.all_ids[start : start + n]
        seq = ScheduledSeq(request, start, tokens, list(table), sample=start + n == request.num_tokens)
        if self.states is not None:
            seq.state_slot = self.states.slot_of(request)
        return seq

    def _preempt(self, request: Request) -> None:
        """Free the sequence's blocks and queue it first for recomputation; its tokens so far are kept."""
        self.running.remove(request)
        self._release(request)
        request.status = RequestStatus.WAITING
        request.num_computed = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def _release(self, request: Request) -> None:
        """Give back what a sequence holds: its KV blocks, its state slot, its drafter's state."""
        self.kv.free(request)
        if self.states is not None:
            self.states.free(request)
        if self.drafter is not None:
            self.drafter.release(request)

    # ---- update ------------------------------------------------------------------------------------------

    def update(self, batch: ScheduledBatch, sampled: dict[Request, int | list[int]]) -> list[Request]:
        """Apply one step's result ({sequence: new token, or the accepted drafts plus one for a speculating
        sequence}); returns the sequences that got tokens."""
        advanced = []
        for seq in batch.seqs:
            request = seq.request
            if request.finished:
                continue  # aborted while the step ran
            if seq.draft is not None:
                self._update_speculative(seq, sampled[request])
                advanced.append(request)
                continue
            request.num_computed += len(seq.token_ids)
            self._commit(request)
            if not seq.sample:
                continue
            token = sampled[request]
            request.output_ids.append(token if isinstance(token, int) else token[0])
            self._check_token_stop(request)
            advanced.append(request)
        return advanced

    def _update_speculative(self, seq: ScheduledSeq, tokens: list[int]) -> None:
        """Keep the accepted drafts (tokens[:-1]) and the token after them; the KV of rejected drafts is
        dropped by rolling the computed length back and freeing the blocks past it."""
        request = seq.request
        accepted = len(tokens) - 1
        if tokens[:accepted] != seq.draft.token_ids[:accepted]:
            raise RuntimeError(f"verification of {request.request_id!r} kept tokens that were not drafted")
        self.drafter.stats.record(len(seq.draft.token_ids), accepted)
        request.num_computed += 1 + accepted  # the last accepted token's KV, then each accepted draft's
        for token in tokens:
            request.output_ids.append(token)
            self._check_token_stop(request)
            if request.finished:
                return  # finish() freed the blocks; later tokens are dropped as plain decoding would
        self._commit(request)
        self.kv.truncate(request, request.num_computed)

    def _commit(self, request: Request) -> None:
        """Index the sequence's full, computed blocks in the prefix cache."""
        full = request.num_computed // self.kv.block_size
        keys = extend_block_keys(
            request.block_keys, request.all_ids, self.kv.block_size, full, request.key_salt
        )
        self.kv.commit(request, keys, request.num_computed)

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
