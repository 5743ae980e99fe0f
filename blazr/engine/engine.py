"""Engine: the synchronous step loop (schedule -> execute -> update) plus detokenization and stop strings.

One `step()` runs one continuous batch (prefill chunks and decode tokens of many sequences) and returns a
RequestOutput for every sequence that produced a token or ended. A request with n > 1 runs as n sequences
(choices, RequestOutput.index); choices 1..n-1 wait until choice 0's prompt is in the prefix cache and then
share its full blocks, recomputing only the partly filled last block (at most block_size tokens).
Not thread-safe: drive it from one thread (AsyncEngine does that for async callers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.backends.base import Backend
from blazr.engine.block_pool import BlockPool
from blazr.engine.constraints import ConstraintMatcher, constraint_tokenizer
from blazr.engine.dry import breaker_tokens
from blazr.engine.kv_cache import KVCacheManager
from blazr.engine.kv_dtype import choose_kv_dtype
from blazr.engine.lora_registry import LoraRegistry
from blazr.engine.request import FinishReason, Request, RequestOutput, SamplingParams, TokenLogprob
from blazr.engine.runner import ModelRunner, kv_pool_blocks
from blazr.engine.sampling import StopStrings, make_rng
from blazr.engine.scheduler import Scheduler
from blazr.engine.slots import SlotStore
from blazr.engine.spec.config import build_drafter
from blazr.engine.spec.draft import SpecStats
from blazr.engine.state_pool import StatePool
from blazr.errors import ConfigError
from blazr.models.cache import is_stateful


@dataclass
class _TextState:
    """A sequence's streaming detokenizer and stop-string matcher."""

    decoder: Any  # tokenizer.stream(): push(id) -> str, flush() -> str
    stops: StopStrings


class Engine:
    """Runs requests on one model. `num_ctx` bounds prompt + generated tokens of each sequence.

    KV pool: `num_blocks` blocks of `block_size` tokens, else as many as `kv_cache_bytes` holds, else
    `max_seqs` full contexts; its elements are `kv_cache_type` (f32, f16, or auto/None: f16 where the CPU
    rounds activations to int8; blazr.engine.kv_dtype). `max_num_batched_tokens` caps the tokens of one step (long prompts are chunked);
    `prefill_chunk` additionally caps one sequence's tokens per step. `max_waiting` bounds the queue
    (add_request raises QueueFullError past it; None: unbounded).

    Speculative decoding: `speculative="ngram"` drafts by prompt lookup (n-grams of prompt_lookup_min..max
    tokens), `"draft"` with `draft_model` (a smaller model of the same vocabulary on the same backend); up to
    `num_speculative_tokens` drafts per sequence and step are verified in the batch's one forward pass."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        backend: Backend,
        num_ctx: int = 2048,
        block_size: int = 16,
        max_seqs: int = 8,
        prefill_chunk: int | None = None,
        num_blocks: int | None = None,
        kv_cache_bytes: int | None = None,
        kv_cache_type: str | None = None,
        max_num_batched_tokens: int = 512,
        max_waiting: int | None = 256,
        enable_prefix_cache: bool = True,
        speculative: str | None = None,
        num_speculative_tokens: int = 5,
        prompt_lookup_min: int = 1,
        prompt_lookup_max: int = 3,
        draft_model: Any = None,
    ):
        max_pos = model.args.max_position_embeddings
        if num_ctx < 2 or num_ctx > max_pos:
            raise ConfigError(f"num_ctx={num_ctx} is out of range; this model allows 2 to {max_pos} tokens")
        _check_positive(
            max_seqs=max_seqs,
            block_size=block_size,
            prefill_chunk=prefill_chunk,
            num_blocks=num_blocks,
            kv_cache_bytes=kv_cache_bytes,
            max_num_batched_tokens=max_num_batched_tokens,
            max_waiting=max_waiting,
        )
        self.model = model
        self.tokenizer = tokenizer
        self.backend = backend
        self.num_ctx = num_ctx
        self.vocab_size = model.args.vocab_size
        stateful = is_stateful(model)
        if stateful and speculative is not None:
            raise ConfigError(
                "speculative decoding is not supported for models with state-space (Mamba) layers: a rejected "
                "draft would have to roll their recurrent state back; leave speculative decoding off"
            )
        # a cached block's keys say nothing of the recurrent state after it: models with state-space layers
        # recompute every prompt (docs/architecture.md, "State-space models")
        enable_prefix_cache = enable_prefix_cache and not stateful
        self.kv_dtype = choose_kv_dtype(model, backend, kv_cache_type)  # before the pool is sized in bytes
        blocks = kv_pool_blocks(model, num_ctx, block_size, max_seqs, num_blocks, kv_cache_bytes)
        self.pool = BlockPool(blocks, block_size)
        self.kv = KVCacheManager(self.pool, enable_prefix_cache)
        self.drafter = build_drafter(
            speculative,
            num_speculative_tokens,
            prompt_lookup_min,
            prompt_lookup_max,
            draft_model,
            backend,
            model,
            (blocks, block_size, max_seqs, num_ctx),
        )
        self.scheduler = Scheduler(
            self.kv,
            num_ctx,
            max_seqs,
            tokenizer.eos_ids,
            prefill_chunk,
            max_num_batched_tokens,
            max_waiting,
            self.drafter,
            StatePool(max_seqs) if stateful else None,
        )
        self.runner = ModelRunner(model, backend, blocks, block_size, max_seqs)
        self.loras = LoraRegistry(model)  # adapters requests pick by SamplingParams.lora_adapter
        self.slots = SlotStore(self.kv, model, backend, self.runner.cache)  # SamplingParams.slot_id
        self._text: dict[Request, _TextState] = {}  # sequences not yet reported finished
        self._ids_in_use: dict[str, int] = {}  # request id -> its choices not yet reported finished
        self._pending: list[RequestOutput] = []  # outputs for the next step() (aborts, empty prompts)
        self._token_texts: list[str] | None = None  # each token's text, decoded once when DRY first needs it
        self._dry_cache: dict[tuple[str, ...], frozenset[int]] = {}  # breakers -> their token ids

    # ---- requests ----------------------------------------------------------------------------------------

    def check_request(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise ConfigError for bad sampling params or a prompt that does not fit the context, and
        QueueFullError when the waiting queue has no room for the request's n sequences."""
        params.validate(self.vocab_size)
        if params.lora_adapter is not None:
            self.loras.get(params.lora_adapter)  # LoraNotFoundError naming it
        if params.constraint is not None:
            constraint_tokenizer(self.tokenizer)  # built once; a tokenizer that cannot serve fails here
        if len(prompt_ids) >= self.num_ctx:
            raise ConfigError(
                f"the prompt has {len(prompt_ids)} tokens but the context limit is num_ctx={self.num_ctx} "
                "(prompt plus at least one generated token); shorten the prompt or raise num_ctx"
            )
        bad = [t for t in prompt_ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise ConfigError(f"prompt token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
        self.scheduler.check_capacity(params.n)

    def add_request(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> None:
        """Queue a request (params.n sequences); it joins the next step. An empty prompt ends at once."""
        params = params if params is not None else SamplingParams()
        prompt_ids = [int(t) for t in prompt_ids]
        self.check_request(prompt_ids, params)
        if request_id in self._ids_in_use:
            raise ConfigError(f"request id {request_id!r} is already in use")
        matchers = [self._matcher(params) for _ in range(params.n)]  # each choice walks the grammar alone
        self._ids_in_use[request_id] = params.n
        leader = None
        adapter = self.loras.get(params.lora_adapter) if params.lora_adapter is not None else None
        if params.slot_id is not None:
            self.slots.create(params.slot_id).busy += 1
        for index in range(params.n):
            request = Request(request_id, prompt_ids, params, rng=make_rng(params.seed, index), index=index)
            request.adapter = adapter
            request.matcher = matchers[index]
            if params.dry_multiplier > 0.0:
                request.dry_breakers = self._dry_breakers(tuple(params.dry_sequence_breakers))
            request.leader = leader if self.kv.enable_prefix_cache else None
            leader = leader or request
            self._text[request] = _TextState(self.tokenizer.stream(), StopStrings(params.stop))
            if not prompt_ids:
                request.finish(FinishReason.STOP)  # nothing to continue from
                self._pending.append(self._output(request, [], ""))
            else:
                self.scheduler.add(request)

    def _dry_breakers(self, breakers: tuple[str, ...]) -> frozenset[int]:
        """Token ids whose text holds a DRY sequence breaker; each set of breakers is computed once."""
        if breakers not in self._dry_cache:
            if self._token_texts is None:
                self._token_texts = [self.tokenizer.decode([i]) for i in range(self.vocab_size)]
            self._dry_cache[breakers] = breaker_tokens(self._token_texts, breakers)
        return self._dry_cache[breakers]

    def _matcher(self, params: SamplingParams) -> ConstraintMatcher | None:
        if params.constraint is None:
            return None
        return ConstraintMatcher(params.constraint, self.tokenizer, self.vocab_size)

    def abort(self, request_id: str) -> None:
        """Stop a request (all its choices) and free its KV blocks now; the final outputs (finish_reason
        "abort") come with the next step(). Unknown or finished ids are ignored."""
        for request in self.scheduler.abort(request_id):
            self._pending.append(self._output(request, [], ""))

    def has_unfinished(self) -> bool:
        """Whether step() still has work or outputs to report."""
        return self.scheduler.has_unfinished() or bool(self._pending)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def spec_stats(self) -> SpecStats | None:
        """Speculative decoding counters (drafted / accepted tokens), or None when it is off."""
        return self.drafter.stats if self.drafter is not None else None

    # ---- the loop ----------------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one batch; returns an output for each sequence that got a token or finished."""
        outputs, self._pending = self._pending, []
        batch = self.scheduler.schedule()
        if batch is None:
            return outputs
        before = {s.request: len(s.request.output_ids) for s in batch.seqs}
        tokens, logprobs = self.runner.execute(batch)
        for request in self.scheduler.update(batch, tokens):
            new = len(request.output_ids) - before[request]
            outputs.append(self._token_output(request, new, logprobs.get(request)))
        self.loras.sweep(r.adapter for r in self._text)
        return outputs

    def _token_output(
        self, request: Request, num_new: int, logprobs: list[TokenLogprob] | None
    ) -> RequestOutput:
        """Detokenize the sequence's new tokens (several when drafts were accepted), apply stop strings, and
        build its output. Tokens after a stop string are dropped, as plain decoding would never make them."""
        state = self._text[request]
        first = len(request.output_ids) - num_new
        new_ids = request.output_ids[first : len(request.completion_ids)]
        text, hit = "", None
        for i, token in enumerate(new_ids):
            piece, hit = state.stops.push(state.decoder.push(token))
            text += piece
            if hit is not None:
                new_ids = new_ids[: i + 1]
                del request.output_ids[first + i + 1 :]
                break
        if hit is None and request.finished:
            tail, hit = state.stops.push(state.decoder.flush())
            text += tail if hit is not None else tail + state.stops.flush()
        if hit is not None:
            self.scheduler.finish(request, FinishReason.STOP, hit)
        logprobs = logprobs[: len(new_ids)] if logprobs and new_ids else None
        return self._output(request, new_ids, text, logprobs)

    def _output(
        self, request: Request, new_ids: list[int], text: str, logprobs: list[TokenLogprob] | None = None
    ) -> RequestOutput:
        if request.finished:
            self._release(request)
        return RequestOutput(
            request_id=request.request_id,
            token_ids=new_ids,
            text=text,
            finished=request.finished,
            finish_reason=request.finish_reason,
            prompt_tokens=len(request.prompt_ids),
            completion_tokens=len(request.completion_ids),
            stop_reason=request.stop_reason,
            logprobs=logprobs,
            cached_tokens=request.num_cached_tokens,
            index=request.index,
        )

    def _release(self, request: Request) -> None:
        """Forget a finished sequence's text state; the request id is free again once all choices ended. A
        request run in a slot leaves its KV pinned there (choice 0's)."""
        if self._text.pop(request, None) is None:
            return
        slot_id = request.params.slot_id
        if slot_id is not None and request.index == 0 and slot_id in self.slots.slots:
            self.slots.slots[slot_id].busy -= 1
            self.slots.keep(slot_id, request.all_ids, request.block_keys)
        left = self._ids_in_use[request.request_id] - 1
        if left:
            self._ids_in_use[request.request_id] = left
        else:
            del self._ids_in_use[request.request_id]


def _check_positive(**settings: int | None) -> None:
    bad = {name: value for name, value in settings.items() if value is not None and value < 1}
    if bad:
        listed = ", ".join(f"{name}={value}" for name, value in bad.items())
        raise ConfigError(f"engine settings must be positive integers: {listed}")
