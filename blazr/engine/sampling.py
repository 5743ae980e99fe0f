"""Turning logits into tokens: host-side logits processors (numpy), the call into `Backend.sample`, logprobs,
and stop-string matching on the detokenized text.

Order per token (as llama.cpp): logit_bias, repetition penalty, frequency/presence penalties, the constraint
mask (last, so nothing can lift it), then the backend's temperature / top-k / top-p / min-p sampler with a
uniform draw from the request's own seeded RNG. Only rows that need host work are downloaded; the others are
sampled on the device as they are. A request with llama.cpp's extras (DRY, typical-p, dynamic temperature,
XTC, top-n-sigma, mirostat) is sampled on the host by llama.cpp's whole chain (sampling_chain.py, dry.py) with
the same draw.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

import numpy as np

from blazr.backends.base import Array, Backend, SampleParams
from blazr.engine import sampling_chain
from blazr.engine.constraints import MASKED_LOGIT
from blazr.engine.dry import apply_dry
from blazr.engine.request import Request, SamplingParams, TokenLogprob

# ---- logits processors (in place on one float32 row) ---------------------------------------------------


def apply_logit_bias(logits: np.ndarray, bias: dict[int, float]) -> None:
    """logits (V,): add bias[token] to each listed token."""
    for token, value in bias.items():
        logits[int(token)] += value


def apply_repeat_penalty(logits: np.ndarray, context_ids: list[int], penalty: float, last_n: int) -> None:
    """llama.cpp repetition penalty over the distinct tokens among the last `last_n` context tokens (-1: all):
    positive logits are divided by the penalty, negative ones multiplied, so both become less likely."""
    if penalty == 1.0 or last_n == 0 or not context_ids:
        return
    window = context_ids if last_n < 0 else context_ids[-last_n:]
    ids = np.unique(np.asarray(window, dtype=np.int64))  # (U,)
    seen = logits[ids]
    logits[ids] = np.where(seen > 0, seen / penalty, seen * penalty)


def apply_frequency_presence(
    logits: np.ndarray, generated_ids: list[int], frequency: float, presence: float
) -> None:
    """OpenAI penalties over the generated tokens: logit -= count * frequency + (count > 0) * presence."""
    if (frequency == 0.0 and presence == 0.0) or not generated_ids:
        return
    counts = Counter(generated_ids)
    ids = np.fromiter(counts.keys(), dtype=np.int64)  # (U,)
    n = np.fromiter(counts.values(), dtype=np.float32)  # (U,)
    logits[ids] -= n * frequency + presence


def needs_processing(params: SamplingParams) -> bool:
    """Whether the logits must come to the host before sampling (processors or logprobs)."""
    return bool(
        params.logit_bias
        or (params.repeat_penalty != 1.0 and params.repeat_last_n != 0)
        or params.frequency_penalty != 0.0
        or params.presence_penalty != 0.0
        or params.logprobs is not None
    )


def needs_host(request: Request) -> bool:
    """Whether this sequence's logits row must come to the host: processors, logprobs, a constraint or
    llama.cpp's sampler extras."""
    p = request.params
    return request.matcher is not None or needs_processing(p) or sampling_chain.needs_chain(p)


def process_logits(logits: np.ndarray, request: Request) -> np.ndarray:
    """logits (V,) -> a processed float32 copy for this request's next token."""
    out = np.array(logits, dtype=np.float32)  # (V,)
    p = request.params
    apply_logit_bias(out, p.logit_bias)
    apply_repeat_penalty(out, request.all_ids, p.repeat_penalty, p.repeat_last_n)
    apply_frequency_presence(out, request.output_ids, p.frequency_penalty, p.presence_penalty)
    if p.dry_multiplier > 0.0:  # after the penalties, as llama.cpp's chain
        dry = (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n)
        apply_dry(out, request.all_ids, *dry, request.dry_breakers)
    if request.matcher is not None:
        request.matcher.apply(out, request.output_ids)
    return out


def token_logprobs(logits: np.ndarray, token_id: int, top_n: int) -> TokenLogprob:
    """Log-softmax of the processed logits (V,): the chosen token's logprob and the top_n alternatives."""
    x = logits.astype(np.float64)
    logp = x - x.max()
    logp -= np.log(np.exp(logp).sum())  # (V,)
    top = np.argsort(-logp, kind="stable")[:top_n]
    return TokenLogprob(int(token_id), float(logp[token_id]), [(int(t), float(logp[t])) for t in top])


# ---- the sampler -----------------------------------------------------------------------------------------


def make_rng(seed: int | None, index: int = 0) -> np.random.Generator:
    """A sequence's own RNG: the same seed gives the same draws; None or a negative seed (llama.cpp uses -1)
    gives a fresh random seed. Choice
    `index` > 0 of an n > 1 request draws from (seed, index), so seeded choices differ yet repeat across runs,
    and choice 0 draws exactly what an n = 1 request with that seed draws."""
    if seed is None or seed < 0:
        return np.random.default_rng()
    return np.random.default_rng(seed if index == 0 else [seed, index])


def build_sample_params(requests: list[Request]) -> SampleParams:
    """One row per request; draws each request's next uniform from its own RNG (greedy rows too, so a
    request's draw sequence never depends on its neighbours)."""
    ps = [r.params for r in requests]
    return SampleParams(
        temperature=np.array([p.temperature for p in ps], dtype=np.float32),
        top_k=np.array([p.top_k for p in ps], dtype=np.int32),
        top_p=np.array([p.top_p for p in ps], dtype=np.float32),
        min_p=np.array([p.min_p for p in ps], dtype=np.float32),
        uniform=np.array([r.rng.random() for r in requests], dtype=np.float64),
    )


def select_params(params: SampleParams, rows: list[int]) -> SampleParams:
    """The sampling knobs of the given rows only."""
    return SampleParams(**{f.name: getattr(params, f.name)[rows] for f in fields(SampleParams)})


class Sampler:
    """Samples one token per logits row. Rows stay on the device unless processors, logprobs or a constraint
    need them on the host; those rows alone are downloaded."""

    def __init__(self, backend: Backend):
        self.backend = backend

    def sample(self, logits: Array, requests: list[Request]) -> tuple[list[int], list[TokenLogprob | None]]:
        """logits (R, V) with row i for requests[i] -> (token ids, per-row logprobs or None)."""
        params = build_sample_params(requests)
        host = [i for i, r in enumerate(requests) if needs_host(r)]
        if not host:
            ids = self.backend.download(self.backend.sample(logits, params))  # (R,)
            return [int(t) for t in ids], [None] * len(requests)
        ids = np.zeros(len(requests), dtype=np.int64)  # (R,)
        device = sorted(set(range(len(requests))) - set(host))
        if device:
            picked = self.backend.sample(
                self._rows(logits, device, len(requests)), select_params(params, device)
            )
            ids[device] = self.backend.download(picked)
        logprobs: list[TokenLogprob | None] = [None] * len(requests)
        host_logits = self.backend.download(self._rows(logits, host, len(requests)))  # (H, V)
        rows = np.stack([process_logits(host_logits[j], requests[i]) for j, i in enumerate(host)])  # (H, V)
        picked = self.backend.download(
            self.backend.sample(self.backend.upload(rows, dtype="f32"), select_params(params, host))
        )  # (H,)
        for j, i in enumerate(host):
            request = requests[i]
            if sampling_chain.needs_chain(request.params):  # llama.cpp's chain, with the same uniform draw
                picked[j], request.mirostat_mu = sampling_chain.sample(
                    rows[j], request.params, request.mirostat_mu, float(params.uniform[i]), request.rng
                )
        for j, (i, token) in enumerate(zip(host, picked, strict=True)):
            request = requests[i]
            if request.matcher is not None and rows[j][token] <= MASKED_LOGIT:
                token = int(np.argmax(rows[j]))  # float rounding picked a masked token: take the best allowed
            ids[i] = token
            if request.params.logprobs is not None:
                logprobs[i] = token_logprobs(rows[j], int(token), request.params.logprobs)
        return [int(t) for t in ids], logprobs

    def _rows(self, logits: Array, rows: list[int], total: int) -> Array:
        """logits (R, V) -> (len(rows), V), gathered on the device (embed is a row gather)."""
        if len(rows) == total:
            return logits
        return self.backend.embed(logits, self.backend.upload(np.asarray(rows, dtype=np.int32)))


# ---- stop strings ----------------------------------------------------------------------------------------


class StopStrings:
    """Finds stop strings in streamed text. Text that could still be the start of a stop string is held back,
    so the caller never emits part of a stop string, even when it is split across tokens."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.held = ""  # the tail of the text that is a prefix of some stop string

    def push(self, piece: str) -> tuple[str, str | None]:
        """Add new text. Returns (text safe to emit, the stop string found or None). After a hit the text
        from the stop string on is dropped."""
        text = self.held + piece
        hit = self._earliest_stop(text)
        if hit is not None:
            index, stop = hit
            self.held = ""
            return text[:index], stop
        keep = self._partial_suffix_len(text)
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep], None

    def flush(self) -> str:
        """The held-back text, released when the request ends for a reason other than a stop string."""
        text, self.held = self.held, ""
        return text

    def _earliest_stop(self, text: str) -> tuple[int, str] | None:
        found = [(text.find(s), s) for s in self.stops if s in text]
        return min(found, key=lambda f: f[0]) if found else None

    def _partial_suffix_len(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
