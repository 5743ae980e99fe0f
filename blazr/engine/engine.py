"""Engine: the synchronous step loop (schedule -> execute -> update) plus detokenization and stop strings.

One `step()` runs one batch and returns a RequestOutput for every request that produced a token or ended.
Not thread-safe: drive it from one thread (AsyncEngine does that for async callers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazr.backends.base import Backend
from blazr.engine.kv_cache import BlockPool
from blazr.engine.request import FinishReason, Request, RequestOutput, SamplingParams, TokenLogprob
from blazr.engine.runner import ModelRunner
from blazr.engine.sampling import StopStrings, make_rng
from blazr.engine.scheduler import Scheduler
from blazr.errors import ConfigError


@dataclass
class _TextState:
    """A request's streaming detokenizer and stop-string matcher."""

    decoder: Any  # tokenizer.stream(): push(id) -> str, flush() -> str
    stops: StopStrings


class Engine:
    """Runs requests on one model. `num_ctx` bounds prompt + generated tokens of each request."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        backend: Backend,
        num_ctx: int = 2048,
        block_size: int = 16,
        max_seqs: int = 8,
        prefill_chunk: int | None = None,
    ):
        max_pos = model.args.max_position_embeddings
        if num_ctx < 2 or num_ctx > max_pos:
            raise ConfigError(f"num_ctx={num_ctx} is out of range; this model allows 2 to {max_pos} tokens")
        if max_seqs < 1 or block_size < 1 or (prefill_chunk is not None and prefill_chunk < 1):
            raise ConfigError(
                f"engine settings must be positive: max_seqs={max_seqs}, block_size={block_size}, "
                f"prefill_chunk={prefill_chunk}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.backend = backend
        self.num_ctx = num_ctx
        self.vocab_size = model.args.vocab_size
        self.pool = BlockPool.for_context(num_ctx, max_seqs, block_size)
        self.scheduler = Scheduler(self.pool, num_ctx, max_seqs, tokenizer.eos_ids, prefill_chunk)
        self.runner = ModelRunner(model, backend, self.pool.num_blocks, block_size)
        self._text: dict[str, _TextState] = {}  # by request id, for requests not yet reported finished
        self._pending: list[RequestOutput] = []  # outputs for the next step() (aborts, empty prompts)

    # ---- requests ----------------------------------------------------------------------------------------

    def check_request(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise ConfigError for bad sampling params or a prompt that does not fit the context."""
        params.validate(self.vocab_size)
        if len(prompt_ids) >= self.num_ctx:
            raise ConfigError(
                f"the prompt has {len(prompt_ids)} tokens but the context limit is num_ctx={self.num_ctx} "
                "(prompt plus at least one generated token); shorten the prompt or raise num_ctx"
            )
        bad = [t for t in prompt_ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise ConfigError(f"prompt token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")

    def add_request(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> None:
        """Queue a request; it joins the next step. An empty prompt ends at once with no tokens."""
        params = params if params is not None else SamplingParams()
        prompt_ids = [int(t) for t in prompt_ids]
        self.check_request(prompt_ids, params)
        if request_id in self._text:
            raise ConfigError(f"request id {request_id!r} is already in use")
        request = Request(request_id, prompt_ids, params, rng=make_rng(params.seed))
        self._text[request_id] = _TextState(self.tokenizer.stream(), StopStrings(params.stop))
        if not prompt_ids:
            request.finish(FinishReason.STOP)  # nothing to continue from
            self._pending.append(self._output(request, [], ""))
            return
        self.scheduler.add(request)

    def abort(self, request_id: str) -> None:
        """Stop a request and free its KV blocks now; its final output (finish_reason "abort") comes with the
        next step(). Unknown or finished ids are ignored."""
        request = self.scheduler.abort(request_id)
        if request is not None:
            self._pending.append(self._output(request, [], ""))

    def has_unfinished(self) -> bool:
        """Whether step() still has work or outputs to report."""
        return self.scheduler.has_unfinished() or bool(self._pending)

    # ---- the loop ----------------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one batch; returns an output for each request that got a token or finished."""
        outputs, self._pending = self._pending, []
        batch = self.scheduler.schedule()
        if batch is None:
            return outputs
        tokens, logprobs = self.runner.execute(batch)
        for request in self.scheduler.update(batch, tokens):
            outputs.append(self._token_output(request, logprobs.get(request.request_id)))
        return outputs

    def _token_output(self, request: Request, logprob: TokenLogprob | None) -> RequestOutput:
        """Detokenize the request's new token, apply stop strings, and build its output."""
        state = self._text[request.request_id]
        new_ids = [] if request.ended_by_stop_token else [request.output_ids[-1]]
        text, hit = state.stops.push(state.decoder.push(new_ids[0]) if new_ids else "")
        if hit is None and request.finished:
            tail, hit = state.stops.push(state.decoder.flush())
            text += tail if hit is not None else tail + state.stops.flush()
        if hit is not None:
            self.scheduler.finish(request, FinishReason.STOP, hit)
        logprobs = [logprob] if logprob is not None and new_ids else None
        return self._output(request, new_ids, text, logprobs)

    def _output(
        self, request: Request, new_ids: list[int], text: str, logprobs: list[TokenLogprob] | None = None
    ) -> RequestOutput:
        if request.finished:
            self._text.pop(request.request_id, None)
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
        )
