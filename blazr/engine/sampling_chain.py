"""llama.cpp's sampler chain on the host, for the rows that ask for what the backends' sampler does not do:
DRY, typical-p, dynamic temperature, XTC, top-n-sigma and mirostat v1 / v2 (llama.cpp's parameter names and
semantics, src/llama-sampler.cpp and common/sampling.cpp).

llama.cpp's default order after the penalties: DRY (engine/dry.py, applied to the logits by
sampling.process_logits), top-n-sigma, top-k, typical-p, top-p, min-p, XTC, then the
temperature (dynamic when dynatemp_range > 0) and a draw from what is left. With mirostat 1 or 2 the chain is
the temperature and then mirostat, which picks the token itself and adapts its target `mu` (kept per
sequence, Request.mirostat_mu). Each step works on the candidates still in play, sorted by logit
(ties in token order); the draw is the sequence's own uniform, so seeded requests repeat. XTC draws its own
chance from the sequence's RNG, only when it is on, so other requests' draws never move.
"""

from __future__ import annotations

import math

import numpy as np

from blazr.engine.request import SamplingParams


def needs_chain(params: SamplingParams) -> bool:
    """Whether this request's tokens come from the host chain rather than the backend's sampler."""
    return bool(
        params.mirostat
        or params.dry_multiplier > 0.0
        or params.typical_p < 1.0
        or params.dynatemp_range > 0.0
        or params.xtc_probability > 0.0
        or params.top_n_sigma > 0.0
    )


class Candidates:
    """Token ids and their float32 logits, sorted by logit descending (ties: lower id first)."""

    def __init__(self, logits: np.ndarray):
        ids = np.argsort(-logits, kind="stable")  # (V,)
        self.ids, self.logits = ids, logits[ids].astype(np.float32)  # (N,), (N,)

    def keep(self, n: int) -> None:
        self.ids, self.logits = self.ids[:n], self.logits[:n]

    def keep_mask(self, mask: np.ndarray) -> None:
        self.ids, self.logits = self.ids[mask], self.logits[mask]

    def probs(self) -> np.ndarray:
        """(N,) softmax of the logits, float64."""
        x = self.logits.astype(np.float64)
        e = np.exp(x - x.max())
        return e / e.sum()


def sample(
    logits: np.ndarray, params: SamplingParams, mu: float | None, uniform: float, rng: np.random.Generator
) -> tuple[int, float | None]:
    """(the next token, mirostat's new mu or None) from logits (V,) (penalties and logit bias already
    applied) through llama.cpp's chain; `mu` is the sequence's mirostat target so far (None: not started)."""
    c = Candidates(logits)
    c.keep_mask(np.isfinite(c.logits))
    if params.mirostat:
        _temperature(c, params.temperature)
        return _mirostat(c, params, mu, uniform, len(logits))
    _top_n_sigma(c, params.top_n_sigma)
    if params.top_k > 0:
        c.keep(min(params.top_k, len(c.ids)))
    _typical(c, params.typical_p)
    _top_p(c, params.top_p)
    _min_p(c, params.min_p)
    if params.xtc_probability > 0.0:
        _xtc(c, params.xtc_probability, params.xtc_threshold, float(rng.random()))
    _dynamic_temperature(c, params.temperature, params.dynatemp_range, params.dynatemp_exponent)
    return int(c.ids[_draw(c.probs(), uniform)]), mu


def _draw(probs: np.ndarray, uniform: float) -> int:
    """Index of the first candidate whose running sum reaches uniform * total (llama.cpp's dist)."""
    running = np.cumsum(probs)  # (N,)
    return int(min(np.searchsorted(running, uniform * running[-1], side="left"), len(probs) - 1))


def _top_n_sigma(c: Candidates, n: float) -> None:
    """Keep logits within n standard deviations of the largest (population std over the finite ones)."""
    if n <= 0.0 or len(c.ids) <= 1:
        return
    x = c.logits.astype(np.float64)
    c.keep_mask(c.logits >= x.max() - n * x.std())


def _typical(c: Candidates, p: float) -> None:
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to mass p."""
    if p >= 1.0 or len(c.ids) <= 1:
        return
    probs = c.probs()
    logp = np.log(np.maximum(probs, np.finfo(np.float64).tiny))
    entropy = -(probs * logp).sum()
    order = np.argsort(np.abs(-logp - entropy), kind="stable")  # most typical first
    cum = np.cumsum(probs[order])
    last = int(np.searchsorted(cum, p, side="right")) + 1  # up to and including the token passing p
    kept = np.sort(order[: min(last, len(order))])  # back in logit order
    c.ids, c.logits = c.ids[kept], c.logits[kept]


def _top_p(c: Candidates, p: float) -> None:
    """Keep the most likely tokens until their mass reaches p (the one that crosses it included)."""
    if p >= 1.0 or len(c.ids) <= 1:
        return
    cum = np.cumsum(c.probs())
    c.keep(min(int(np.searchsorted(cum, p, side="left")) + 1, len(c.ids)))


def _min_p(c: Candidates, p: float) -> None:
    """Keep tokens at least p times as likely as the most likely one."""
    if p <= 0.0 or len(c.ids) <= 1:
        return
    c.keep_mask(c.logits >= c.logits[0] + np.float32(math.log(p)))


def _xtc(c: Candidates, probability: float, threshold: float, chance: float) -> None:
    """Exclude Top Choices: with the given probability, drop every token above the threshold but the least
    likely of them (when at least two are above it)."""
    if threshold > 0.5 or len(c.ids) < 2 or chance > probability:
        return
    above = int(np.count_nonzero(c.probs() >= threshold))  # a prefix: the candidates are sorted
    if above >= 2:
        c.ids, c.logits = c.ids[above - 1 :], c.logits[above - 1 :]


def _temperature(c: Candidates, temperature: float) -> None:
    """Divide the logits by the temperature; 0 keeps only the most likely token (greedy)."""
    if temperature <= 0.0:
        c.keep(1)
    else:
        c.logits = c.logits / np.float32(temperature)


def _dynamic_temperature(c: Candidates, temperature: float, spread: float, exponent: float) -> None:
    """Entropy-scaled temperature in [temperature - spread, temperature + spread]: a sure model samples
    colder, an unsure one hotter (exponent shapes the mapping); spread 0 is the plain temperature."""
    if spread <= 0.0 or len(c.ids) <= 1:
        _temperature(c, temperature)
        return
    low, high = max(0.0, temperature - spread), temperature + spread
    probs = c.probs()
    nonzero = probs[probs > 0]
    entropy = -(nonzero * np.log(nonzero)).sum()
    normalized = entropy / math.log(len(c.ids))  # 0 (one sure token) .. 1 (uniform)
    _temperature(c, low + (high - low) * normalized**exponent)


def _mirostat(
    c: Candidates, params: SamplingParams, mu: float | None, uniform: float, vocab: int
) -> tuple[int, float]:
    """Mirostat 1 (top-k from an estimated Zipf exponent) or 2 (drop tokens more surprising than mu), then a
    draw; mu (2 * tau at the start, as llama.cpp) moves by eta times the observed surprise's distance from tau."""
    tau, eta = params.mirostat_tau, params.mirostat_eta
    mu = 2.0 * tau if mu is None else mu
    probs = c.probs()
    if params.mirostat == 1:
        m = min(100 - 1, len(probs) - 1)  # llama.cpp estimates from the 100 most likely tokens
        if m >= 1:
            t = np.log(np.arange(2, m + 2) / np.arange(1, m + 1))  # (m,)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                b = np.log(probs[:m] / probs[1 : m + 1])  # (m,)
                s_hat = float((t * b).sum() / (t * t).sum())
                eps = s_hat - 1.0
                k = (eps * 2.0**mu / (1.0 - float(vocab) ** -eps)) ** (1.0 / s_hat)
            c.keep(max(int(k), 1) if math.isfinite(k) else len(c.ids))
    else:
        surprise = -np.log2(np.maximum(probs, np.finfo(np.float64).tiny))
        c.keep(max(int(np.argmax(surprise > mu)) if (surprise > mu).any() else len(c.ids), 1))
    probs = c.probs()
    index = _draw(probs, uniform)
    return int(c.ids[index]), mu - eta * (-math.log2(probs[index]) - tau)
