"""Request-side dataclasses: what a caller asks for (SamplingParams), the engine's per-request state
(Request), and what each engine step hands back (RequestOutput)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.engine.constraints import Constraint, as_constraint
from blazr.errors import ConfigError

MAX_LOGPROBS = 20  # top-N logprobs per token, as in the OpenAI API
MAX_CHOICES = 16  # n: completions per request


class FinishReason(str, enum.Enum):
    """Why a request ended; compares equal to its string value ("stop" == FinishReason.STOP)."""

    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_tokens or the context limit
    ABORT = "abort"  # the caller aborted it


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued (new or preempted): holds no KV blocks
    RUNNING = "running"  # admitted: holds KV blocks, prefilling in chunks or decoding
    FINISHED = "finished"


@dataclass
class SamplingParams:
    """Per-request generation settings (OpenAI and llama.cpp names). Call validate() before use."""

    max_tokens: int = 256
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # 1.0 disables
    top_k: int = 0  # 0 disables
    min_p: float = 0.0  # 0.0 disables
    repeat_penalty: float = 1.0  # llama.cpp style over the last repeat_last_n tokens; 1.0 disables
    repeat_last_n: int = 64  # 0 disables, -1 means the whole context
    frequency_penalty: float = 0.0  # OpenAI style, over generated tokens
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added logit
    seed: int | None = None  # None or negative (llama.cpp's -1): a fresh random seed
    stop: list[str] = field(default_factory=list)  # stop strings, not part of the output
    stop_token_ids: list[int] = field(default_factory=list)  # extra ids that end the request like EOS
    ignore_eos: bool = False  # keep going past the tokenizer's EOS ids (stop_token_ids still apply)
    logprobs: int | None = None  # top-N logprobs per generated token (0..20); None: off
    n: int = 1  # completions of the prompt (choices); they share the prompt's KV blocks
    constraint: Constraint | None = None  # JSON / JSON Schema / regex / grammar the output must match
    # llama.cpp's sampler extras (engine/sampling_chain.py); the defaults leave them off
    typical_p: float = 1.0  # locally typical sampling's mass; 1.0 disables
    dynatemp_range: float = 0.0  # dynamic temperature in [temperature -/+ range]; 0 disables
    dynatemp_exponent: float = 1.0
    xtc_probability: float = 0.0  # Exclude Top Choices: the chance per token; 0 disables
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0  # keep logits within n standard deviations of the top; <= 0 disables
    mirostat: int = 0  # 1 or 2: mirostat v1 / v2 replaces top-k/p and the rest; 0 disables
    mirostat_tau: float = 5.0  # target surprise (bits)
    mirostat_eta: float = 0.1  # learning rate of mu
    dry_multiplier: float = 0.0  # DRY repetition penalty (engine/dry.py); 0 disables
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1  # tokens of context looked at; -1: all, 0: off
    dry_sequence_breakers: list[str] = field(default_factory=lambda: ["\n", ":", '"', "*"])
    # the request field a client set max_tokens with on an OpenAI-style route: then a max_tokens that does not fit
    # beside the prompt is a 400 naming it (OpenAI's and vLLM's rule); None (a server default, Ollama's
    # num_predict, Anthropic's max_tokens, llama.cpp's n_predict) is clamped to the context instead
    max_tokens_field: str | None = None
    speculative: bool = True  # False: this request never runs drafts (a server with speculative decoding on)
    # the name of a LoRA adapter loaded on the model (Engine.loras); None: the base model
    lora_adapter: str | None = None
    slot_id: str | None = None  # a slot (engine/slots.py) that keeps this conversation's KV when it ends

    def validate(self, vocab_size: int | None = None) -> SamplingParams:
        """Raise ConfigError naming the first out-of-range field; returns self so calls can chain."""
        self._validate_types()
        checks = [
            ("max_tokens", self.max_tokens, self.max_tokens >= 1, ">= 1"),
            ("n", self.n, 1 <= self.n <= MAX_CHOICES, f"in [1, {MAX_CHOICES}]"),
            ("temperature", self.temperature, 0.0 <= self.temperature <= 100.0, "in [0, 100]"),
            ("top_p", self.top_p, 0.0 < self.top_p <= 1.0, "in (0, 1]"),
            ("top_k", self.top_k, self.top_k >= 0, ">= 0"),
            ("min_p", self.min_p, 0.0 <= self.min_p <= 1.0, "in [0, 1]"),
            # past these bounds the penalised logits overflow to inf/nan: no useful setting lies there
            ("repeat_penalty", self.repeat_penalty, 0.01 <= self.repeat_penalty <= 100.0, "in [0.01, 100]"),
            ("repeat_last_n", self.repeat_last_n, self.repeat_last_n >= -1, ">= -1"),
            (
                "frequency_penalty",
                self.frequency_penalty,
                -2.0 <= self.frequency_penalty <= 2.0,
                "in [-2, 2]",
            ),
            ("presence_penalty", self.presence_penalty, -2.0 <= self.presence_penalty <= 2.0, "in [-2, 2]"),
            ("typical_p", self.typical_p, 0.0 < self.typical_p <= 1.0, "in (0, 1]"),
            ("dynatemp_range", self.dynatemp_range, 0.0 <= self.dynatemp_range <= 100.0, "in [0, 100]"),
            (
                "dynatemp_exponent",
                self.dynatemp_exponent,
                0.0 <= self.dynatemp_exponent <= 100.0,
                "in [0, 100]",
            ),
            ("xtc_probability", self.xtc_probability, 0.0 <= self.xtc_probability <= 1.0, "in [0, 1]"),
            ("xtc_threshold", self.xtc_threshold, 0.0 <= self.xtc_threshold <= 1.0, "in [0, 1]"),
            ("top_n_sigma", self.top_n_sigma, self.top_n_sigma <= 100.0, "<= 100 (<= 0 disables)"),
            ("mirostat", self.mirostat, self.mirostat in (0, 1, 2), "0, 1 or 2"),
            ("mirostat_tau", self.mirostat_tau, 0.0 <= self.mirostat_tau <= 100.0, "in [0, 100]"),
            ("mirostat_eta", self.mirostat_eta, 0.0 <= self.mirostat_eta <= 10.0, "in [0, 10]"),
            ("dry_multiplier", self.dry_multiplier, 0.0 <= self.dry_multiplier <= 100.0, "in [0, 100]"),
            ("dry_base", self.dry_base, 1.0 <= self.dry_base <= 100.0, "in [1, 100]"),
            ("dry_allowed_length", self.dry_allowed_length, self.dry_allowed_length >= 1, ">= 1"),
            ("dry_penalty_last_n", self.dry_penalty_last_n, self.dry_penalty_last_n >= -1, ">= -1"),
        ]
        if self.logprobs is not None:
            ok = isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_LOGPROBS
            checks.append(("logprobs", self.logprobs, ok, f"in [0, {MAX_LOGPROBS}]"))
        for name, value, ok, rule in checks:
            if not ok:
                raise ConfigError(f"sampling parameter {name}={value!r} is out of range; it must be {rule}")
        self._validate_lists(vocab_size)
        self._validate_constraint()
        return self

    def _validate_constraint(self) -> None:
        """Compile the constraint once (later calls reuse it); a bad spec raises ConfigError naming it."""
        self.constraint = as_constraint(self.constraint)
        if self.constraint is None:
            return
        if self.ignore_eos:
            raise ConfigError(
                "sampling parameter ignore_eos cannot be combined with constraint: a complete constrained "
                "output ends with EOS"
            )
        self.constraint.grammar()

    def _validate_types(self) -> None:
        for name in (
            "max_tokens",
            "top_k",
            "repeat_last_n",
            "n",
            "mirostat",
            "dry_allowed_length",
            "dry_penalty_last_n",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"sampling parameter {name}={value!r} must be an integer")
        if self.lora_adapter is not None and not isinstance(self.lora_adapter, str):
            raise ConfigError(f"lora_adapter={self.lora_adapter!r} must be an adapter's name")
        if self.slot_id is not None and not isinstance(self.slot_id, str):
            raise ConfigError(f"slot_id={self.slot_id!r} must be a slot's id")
        if self.slot_id is not None and self.lora_adapter is not None:
            # a slot's KV is reused by later turns and saved to files: it holds base-model KV only
            raise ConfigError("slot_id cannot be combined with lora_adapter: slots hold the base model's KV")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ConfigError(f"sampling parameter seed={self.seed!r} must be an integer")
        for name in (
            "temperature",
            "top_p",
            "min_p",
            "repeat_penalty",
            "frequency_penalty",
            "presence_penalty",
            "typical_p",
            "dynatemp_range",
            "dynatemp_exponent",
            "xtc_probability",
            "xtc_threshold",
            "top_n_sigma",
            "mirostat_tau",
            "mirostat_eta",
            "dry_multiplier",
            "dry_base",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"sampling parameter {name}={value!r} must be a number")

    def _validate_lists(self, vocab_size: int | None) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]  # a single stop string is a common shorthand
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise ConfigError(
                f"sampling parameter stop={self.stop!r}: stop strings must be non-empty strings"
            )
        breakers = self.dry_sequence_breakers
        if not isinstance(breakers, list) or any(not isinstance(b, str) or not b for b in breakers):
            raise ConfigError(
                f"sampling parameter dry_sequence_breakers={breakers!r}: a list of non-empty strings"
            )
        ids = [("stop_token_ids", t) for t in self.stop_token_ids]
        ids += [("logit_bias", int(t)) for t in self.logit_bias]
        for name, token in ids:
            if token < 0 or (vocab_size is not None and token >= vocab_size):
                limit = f"the vocabulary size {vocab_size}" if vocab_size is not None else "0"
                raise ConfigError(f"sampling parameter {name}: token id {token} is outside [0, {limit})")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> SamplingParams:
        """Build from keyword arguments; an unknown name raises ConfigError listing the valid ones."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(
                f"unknown sampling parameter {unknown[0]!r}; valid names: {', '.join(sorted(known))}"
            )
        return cls(**kwargs)


@dataclass
class TokenLogprob:
    """Logprob of one generated token and the top-N alternatives (from the processed logits)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, logprob), most likely first


@dataclass
class RequestOutput:
    """What one engine step produced for one request. token_ids and text are the new part only."""

    request_id: str
    token_ids: list[int]  # tokens generated this step (EOS / stop token ids excluded)
    text: str  # new final text this step (held back while it could still start a stop string)
    finished: bool
    finish_reason: FinishReason | None  # "stop" | "length" | "abort" | None while running
    prompt_tokens: int
    completion_tokens: int  # all tokens generated so far (EOS / stop token ids excluded)
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it (None for EOS)
    logprobs: list[TokenLogprob] | None = None  # one per token in token_ids, when requested
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (prompt_tokens_details.cached_tokens)
    index: int = 0  # which of the request's n choices this is


@dataclass(eq=False)
class Request:
    """The engine's state for one sequence (one choice of a request). The scheduler advances num_computed."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    rng: np.random.Generator  # this sequence's own stream of uniform draws for sampling
    index: int = 0  # choice number among the request's n
    arrival: int = 0  # admission order: lower is older; preemption takes the highest
    leader: Request | None = None  # choice 0 of an n > 1 request: the others wait for its prompt blocks
    output_ids: list[int] = field(default_factory=list)  # generated tokens, including a final EOS
    num_computed: int = 0  # tokens already written to the KV cache
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    num_preemptions: int = 0
    block_keys: list[bytes] = field(default_factory=list)  # prefix-cache keys of its full blocks so far
    matcher: Any = None  # its own ConstraintMatcher when params.constraint is set
    mirostat_mu: float | None = None  # mirostat's running target surprise (sampling_chain), None until used
    dry_breakers: frozenset[int] = frozenset()  # token ids holding a DRY sequence breaker (set by the engine)
    adapter: Any = None  # the LoraAdapter its lora_adapter named when it was added; None: the base model
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None

    @property
    def key_salt(self) -> bytes | None:
        """What its prefix-cache keys start from: its adapter's salt (KV made with other weights differs)."""
        return self.adapter.salt if self.adapter is not None else None

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def ended_by_stop_token(self) -> bool:
        """Whether the last output token is the EOS or a stop token id (not part of the completion)."""
        return (
            self.finish_reason is FinishReason.STOP
            and not isinstance(self.stop_reason, str)
            and bool(self.output_ids)
        )

    @property
    def completion_ids(self) -> list[int]:
        """Generated tokens without a final EOS / stop token id."""
        return self.output_ids[:-1] if self.ended_by_stop_token else self.output_ids

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def waits_for_leader(self) -> bool:
        """Whether this choice should wait until choice 0 has its prompt in the cache, to share it."""
        lead = self.leader
        return lead is not None and not lead.finished and lead.num_computed < len(lead.prompt_ids)

    def finish(self, reason: FinishReason, stop_reason: str | int | None = None) -> None:
        self.status = RequestStatus.FINISHED
        self.finish_reason = reason
        self.stop_reason = stop_reason
