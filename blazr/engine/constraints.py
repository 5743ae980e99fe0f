"""Constrained decoding: JSON mode, JSON Schema, regex and grammar constraints as a token mask per sequence.

The work is llguidance's (a Rust Earley parser with a token trie; abi3 wheels for Linux, macOS and Windows and
no Python dependencies): a `Constraint` compiles to an llguidance grammar, each sequence gets its own
`ConstraintMatcher`, and before each sampled token the matcher's mask sends every token the grammar cannot
take next to MASKED_LOGIT. The matcher follows the token context it is shown: it consumes what is new and
rolls back what no longer matches (rejected speculative drafts), so a preempted and recomputed sequence, whose
output is kept, needs nothing rebuilt.
Once the grammar is complete the mask allows only EOS, so the sequence ends with finish_reason "stop".
"""

from __future__ import annotations

import json
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blazr.errors import ConfigError
from blazr.tokenizer.token_bytes import token_bytes

log = logging.getLogger(__name__)

CONSTRAINT_KINDS = ("json", "json_schema", "regex", "grammar")
# JSON laid out as json.dumps does: fixed separators and no free whitespace, so a small model cannot wander
# into endless newlines between values.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# Finite, so device samplers never see inf and logprobs of masked tokens stay JSON-serializable.
MASKED_LOGIT = -1e30


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as e:
        raise ConfigError(
            "sampling parameter constraint: constrained decoding needs the llguidance package "
            "(pip install llguidance)"
        ) from e
    return llguidance


@dataclass
class Constraint:
    """What the output must match. kind "json": any JSON object (spec None); "json_schema": a JSON Schema
    (dict or JSON text); "regex": a regular expression (Rust regex syntax, whole output); "grammar": a
    llama.cpp GBNF grammar (rule `root`) or a Lark grammar (rule `start`), told apart by their syntax."""

    kind: str
    spec: Any = None
    _grammar: str | None = field(default=None, init=False, repr=False, compare=False)

    def grammar(self) -> str:
        """The llguidance grammar, compiled and checked once; ConfigError naming the field when bad."""
        if self._grammar is None:
            text = self._compile()
            error = _llguidance().LLMatcher.validate_grammar(text)
            if error:
                raise ConfigError(f"sampling parameter constraint ({self.kind}) is invalid: {error}")
            self._grammar = text
        return self._grammar

    def _compile(self) -> str:
        ll = _llguidance()
        if self.kind not in CONSTRAINT_KINDS:
            raise ConfigError(
                f"sampling parameter constraint kind {self.kind!r} is unknown; use one of {CONSTRAINT_KINDS}"
            )
        if self.kind == "json":
            if self.spec is not None:
                raise ConfigError(
                    'sampling parameter constraint kind "json" takes no spec; use "json_schema"'
                )
            return ll.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_LAYOUT)
        if self.kind == "json_schema":
            return ll.LLMatcher.grammar_from_json_schema(self._schema(), defaults=JSON_LAYOUT)
        if not isinstance(self.spec, str) or not self.spec:
            raise ConfigError(
                f"sampling parameter constraint ({self.kind}) needs its spec as a non-empty string"
            )
        if self.kind == "regex":
            return ll.LLMatcher.grammar_from_regex(self.spec)
        try:
            return ll.grammar_from("grammar", self.spec)
        except ValueError as e:
            raise ConfigError(f"sampling parameter constraint (grammar) is invalid: {e}") from e

    def _schema(self) -> dict[str, Any] | bool:
        spec = self.spec
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except ValueError as e:
                raise ConfigError(
                    f"sampling parameter constraint (json_schema) is not valid JSON: {e}"
                ) from e
        if not isinstance(spec, (dict, bool)):
            raise ConfigError(
                f"sampling parameter constraint (json_schema) must be a JSON Schema object, got {spec!r}"
            )
        return spec


def as_constraint(value: Any) -> Constraint | None:
    """A Constraint from itself, None, or a {"kind": ..., "spec": ...} mapping (the Python API's shorthand)."""
    if value is None or isinstance(value, Constraint):
        return value
    if isinstance(value, dict) and set(value) <= {"kind", "spec"} and "kind" in value:
        return Constraint(value["kind"], value.get("spec"))
    raise ConfigError(f'sampling parameter constraint={value!r} must be a Constraint or {{"kind", "spec"}}')


class _TokenizerSource:
    """What llguidance's TokenizerWrapper reads: token bytes, special ids, EOS/BOS and an encode callback."""

    def __init__(self, tokenizer: Any):
        table = token_bytes(tokenizer.inner)
        self.tokens = table.tokens
        self.special_token_ids = sorted(table.special_ids)
        self.eos_token_id = tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id
        self._inner = tokenizer.inner

    def __call__(self, text: bytes | str) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._inner.encode(text, add_special_tokens=False).ids


_TOKENIZERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def constraint_tokenizer(tokenizer: Any) -> Any:
    """The llguidance tokenizer of a blazr Tokenizer, built once per tokenizer (about 0.3 s for 50k tokens)."""
    cached = _TOKENIZERS.get(tokenizer)
    if cached is None:
        if getattr(tokenizer, "inner", None) is None or not getattr(tokenizer, "eos_ids", None):
            raise ConfigError(
                "sampling parameter constraint: constrained decoding needs a tokenizers-based tokenizer with "
                "an EOS token; this model's tokenizer has none"
            )
        ll = _llguidance()
        wrapper = ll.TokenizerWrapper(_TokenizerSource(tokenizer))
        cached = ll.LLTokenizer(wrapper, eos_token=sorted(tokenizer.eos_ids))
        _TOKENIZERS[tokenizer] = cached
    return cached


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return n if a[:n] == b[:n] else next(i for i in range(n) if a[i] != b[i])


class ConstraintMatcher:
    """One sequence's position in its constraint's grammar; masks logits rows of width `vocab_size`."""

    def __init__(self, constraint: Constraint, tokenizer: Any, vocab_size: int):
        ll = _llguidance()
        ll_tokenizer = constraint_tokenizer(tokenizer)
        self.matcher = ll.LLMatcher(ll_tokenizer, constraint.grammar(), log_level=0)
        if self.matcher.is_error():
            raise ConfigError(
                f"sampling parameter constraint ({constraint.kind}): {self.matcher.get_error()}"
            )
        self.vocab_size = vocab_size
        self.eos_ids = sorted(t for t in tokenizer.eos_ids if t < vocab_size)
        self.tokens: list[int] = []  # the generated tokens the matcher has consumed
        self._bits = np.zeros((1, (ll_tokenizer.vocab_size + 31) // 32), dtype=np.int32)  # (1, W) bitmask

    def sync(self, output_ids: list[int]) -> bool:
        """Move the matcher to the context output_ids (roll back what differs, consume what is new); False when
        the context leaves the grammar (a speculative draft the mask would never have allowed)."""
        n = len(self.tokens)
        if output_ids[:n] != self.tokens:
            common = _common_prefix(self.tokens, output_ids)
            self.matcher.rollback(n - common)
            del self.tokens[common:]
        new = output_ids[len(self.tokens) :]
        taken = self.matcher.try_consume_tokens(new) if new else 0
        self.tokens += new[:taken]
        return taken == len(new)

    def allowed(self, output_ids: list[int]) -> np.ndarray:
        """(V,) bool: the tokens that may follow output_ids. Outside the grammar only EOS is allowed."""
        from llguidance.numpy import fill_next_token_bitmask

        if not self.sync(output_ids):
            log.debug("context outside the grammar (a rejected draft): allowing EOS only")
            self._bits[:] = 0
        else:
            fill_next_token_bitmask(self.matcher, self._bits, 0)
        bits = np.unpackbits(self._bits.astype("<i4").view(np.uint8), bitorder="little")  # (32 * W,)
        allowed = np.zeros(self.vocab_size, dtype=bool)  # (V,)
        width = min(self.vocab_size, bits.shape[0])
        allowed[:width] = bits[:width].astype(bool)
        if not allowed.any():
            allowed[self.eos_ids] = True  # nothing can follow (or the matcher broke): end the sequence
        return allowed

    def apply(self, logits: np.ndarray, output_ids: list[int]) -> None:
        """logits (V,) in place: every token the grammar cannot take next becomes MASKED_LOGIT."""
        logits[~self.allowed(output_ids)] = MASKED_LOGIT

    @property
    def is_complete(self) -> bool:
        """Whether the output so far is a full match (EOS may come next)."""
        return bool(self.matcher.is_accepting())
