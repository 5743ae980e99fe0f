"""Request-body parsing shared by every route: typed field getters that fail with ApiError(400) naming the
field, and the SamplingParams every generation route builds from its body. Unknown fields are ignored."""

from __future__ import annotations

import json
import math
from typing import Any

from quart import request

from blazr.engine.request import SamplingParams
from blazr.server.errors import ApiError

_MISSING = object()


def _bad(name: str, what: str) -> ApiError:
    return ApiError(400, f"'{name}' {what}", param=name)


async def read_json() -> dict:
    """The current request's body as a JSON object; 400 for an empty body, bad JSON or a non-object."""
    raw = await request.get_data(as_text=False)
    if not raw or not raw.strip():
        raise ApiError(400, "the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _value(body: dict, name: str, required: bool) -> Any:
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise _bad(name, "is required")
        return _MISSING
    return value


def get_str(body: dict, name: str, *, required: bool = False, default: str | None = None) -> str | None:
    value = _value(body, name, required)
    if value is _MISSING:
        return default
    if not isinstance(value, str):
        raise _bad(name, f"must be a string, got {_kind(value)}")
    if required and not value.strip():
        raise _bad(name, "must not be empty")
    return value


def _check_range(name: str, value: float, lo: float | None, hi: float | None) -> None:
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if lo is not None and hi is not None:
            rule = f"between {lo} and {hi}"
        else:
            rule = f">= {lo}" if lo is not None else f"<= {hi}"
        raise _bad(name, f"must be {rule}, got {value}")


def get_int(
    body: dict, name: str, *, default: int | None = None, min: int | None = None, max: int | None = None
) -> int | None:
    """An integer field; bool is not an int, and 3.0 counts as 3 (JSON has one number type)."""
    value = _value(body, name, False)
    if value is _MISSING:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be an integer, got {_kind(value)}")
    _check_range(name, value, min, max)
    return value


def get_float(
    body: dict, name: str, *, default: float | None = None, min: float | None = None, max: float | None = None
) -> float | None:
    value = _value(body, name, False)
    if value is _MISSING:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(name, f"must be a number, got {_kind(value)}")
    _check_range(name, float(value), min, max)
    return float(value)


def get_bool(body: dict, name: str, *, default: bool | None = None) -> bool | None:
    value = _value(body, name, False)
    if value is _MISSING:
        return default
    if not isinstance(value, bool):
        raise _bad(name, f"must be true or false, got {_kind(value)}")
    return value


def get_list(body: dict, name: str, *, required: bool = False, default: list | None = None) -> list | None:
    value = _value(body, name, required)
    if value is _MISSING:
        return default
    if not isinstance(value, list):
        raise _bad(name, f"must be an array, got {_kind(value)}")
    return value


def get_dict(body: dict, name: str, *, default: dict | None = None) -> dict | None:
    value = _value(body, name, False)
    if value is _MISSING:
        return default
    if not isinstance(value, dict):
        raise _bad(name, f"must be an object, got {_kind(value)}")
    return value


def get_stop(body: dict, name: str = "stop") -> list[str]:
    """Stop strings: a string, a list of strings, or null/absent (empty strings are dropped)."""
    value = _value(body, name, False)
    if value is _MISSING:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _bad(name, f"must be a string or an array of strings, got {_kind(value)}")
    return [s for s in items if s]


def _logit_bias(body: dict, vocab_size: int) -> dict[int, float]:
    raw = get_dict(body, "logit_bias", default={})
    bias: dict[int, float] = {}
    for key, value in raw.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise _bad("logit_bias", f"keys must be token ids, got {key!r}") from None
        if not 0 <= token < vocab_size:
            raise _bad("logit_bias", f"token id {token} is outside the vocabulary [0, {vocab_size})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad("logit_bias", f"values must be numbers, got {_kind(value)} for token {key}")
        bias[token] = max(-100.0, min(100.0, float(value)))
    return bias


def _max_tokens(body: dict, keys: tuple[str, ...], default: int | None) -> int:
    for key in keys:
        value = get_int(body, key, min=1)
        if value is not None:
            return value
    return default if default is not None else SamplingParams.max_tokens


def sampling_params(
    body: dict,
    *,
    vocab_size: int,
    max_tokens_keys: tuple[str, ...] = ("max_completion_tokens", "max_tokens"),
    default_max_tokens: int | None = None,
) -> SamplingParams:
    """SamplingParams from a request body (OpenAI and llama.cpp names). A huge max_tokens is kept here and
    clamped to the context by generation.py."""
    repeat = get_float(body, "repeat_penalty")
    repeat = repeat if repeat is not None else get_float(body, "repetition_penalty")
    if repeat is not None and not 0.01 <= repeat <= 100.0:
        name = "repeat_penalty" if "repeat_penalty" in body else "repetition_penalty"
        raise _bad(name, f"must be in [0.01, 100], got {repeat}")
    return SamplingParams(
        max_tokens=_max_tokens(body, max_tokens_keys, default_max_tokens),
        temperature=get_float(body, "temperature", default=1.0, min=0.0, max=2.0),
        top_p=_top_p(body),
        top_k=get_int(body, "top_k", default=0, min=0),
        min_p=get_float(body, "min_p", default=0.0, min=0.0, max=1.0),
        repeat_penalty=repeat if repeat is not None else 1.0,
        repeat_last_n=get_int(body, "repeat_last_n", default=64, min=-1),
        frequency_penalty=get_float(body, "frequency_penalty", default=0.0, min=-2.0, max=2.0),
        presence_penalty=get_float(body, "presence_penalty", default=0.0, min=-2.0, max=2.0),
        logit_bias=_logit_bias(body, vocab_size),
        seed=get_int(body, "seed"),
        stop=get_stop(body),
        lora_adapter=get_str(body, "lora_adapter"),
        slot_id=slot_field(body),
        **_sampler_extras(body),
    )


def slot_field(body: dict) -> str | None:
    """The slot a request runs in: llama.cpp's integer `id_slot` (-1: none) or an /api/slots `slot_id`."""
    number = get_int(body, "id_slot", min=-1)
    named = get_str(body, "slot_id")
    if number is not None and number >= 0 and named is not None:
        raise _bad("slot_id", "give id_slot or slot_id, not both")
    return named if named is not None else (str(number) if number is not None and number >= 0 else None)


def _sampler_extras(body: dict) -> dict[str, Any]:
    """llama.cpp's sampler extras by its server's names (typical_p, dynatemp_range / _exponent, xtc_probability
    / _threshold, top_n_sigma, mirostat / _tau / _eta, dry_multiplier / _base / _allowed_length /
    _penalty_last_n / _sequence_breakers); absent ones keep SamplingParams' defaults (off)."""
    out: dict[str, Any] = {}
    for name, low, high in (
        ("typical_p", 0.0, 1.0),
        ("dynatemp_range", 0.0, 100.0),
        ("dynatemp_exponent", 0.0, 100.0),
        ("xtc_probability", 0.0, 1.0),
        ("xtc_threshold", 0.0, 1.0),
        ("top_n_sigma", None, 100.0),
        ("mirostat_tau", 0.0, 100.0),
        ("mirostat_eta", 0.0, 10.0),
    ):
        value = get_float(body, name, min=low, max=high)
        if value is not None:
            out[name] = value
    if out.get("typical_p") == 0.0:
        raise _bad("typical_p", "must be in (0, 1], got 0")
    mirostat = get_int(body, "mirostat", min=0, max=2)
    if mirostat is not None:
        out["mirostat"] = mirostat
    for name, low, high in (("dry_multiplier", 0.0, 100.0), ("dry_base", 1.0, 100.0)):
        value = get_float(body, name, min=low, max=high)
        if value is not None:
            out[name] = value
    for name, low in (("dry_allowed_length", 1), ("dry_penalty_last_n", -1)):
        value = get_int(body, name, min=low)
        if value is not None:
            out[name] = value
    breakers = get_list(body, "dry_sequence_breakers")
    if breakers is not None:
        if any(not isinstance(b, str) or not b for b in breakers):
            raise _bad("dry_sequence_breakers", "must be a list of non-empty strings")
        out["dry_sequence_breakers"] = list(breakers)
    if get_bool(body, "speculative") is False:  # opt out of a server's speculative decoding
        out["speculative"] = False
    return out


def _top_p(body: dict) -> float:
    value = get_float(body, "top_p", default=1.0, min=0.0, max=1.0)
    if value <= 0.0:
        raise _bad("top_p", f"must be in (0, 1], got {value}")
    return value


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
    return names.get(type(value), "an object" if isinstance(value, dict) else type(value).__name__)
