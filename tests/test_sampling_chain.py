"""llama.cpp's sampler extras (blazr/engine/sampling_chain.py) against a plain reference written here from
llama.cpp's src/llama-sampler.cpp: lists of (token, logit) pairs, loops, the same chain order (top-n-sigma,
top-k, typical-p, top-p, min-p, XTC, temperature with its dynamic range, then the draw), mirostat v1 / v2 with
their mu updates. Same logits, params and draws -> the same token (and mu)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blazr.engine import sampling_chain
from blazr.engine.request import SamplingParams

# ---- the plain reference -----------------------------------------------------------------------------------


def softmax(cands):
    top = max(logit for _, logit in cands)
    e = [math.exp(logit - top) for _, logit in cands]
    total = sum(e)
    return [x / total for x in e]


def draw(cands, uniform):
    probs = softmax(cands)
    target, running = uniform * sum(probs), 0.0
    for i, p in enumerate(probs):
        running += p
        if running >= target:
            return i
    return len(cands) - 1


def reference(logits, params, mu, uniform, xtc_chance):
    cands = sorted(((t, float(v)) for t, v in enumerate(logits)), key=lambda c: (-c[1], c[0]))
    if params.mirostat:
        if params.temperature <= 0:
            cands = cands[:1]
        else:
            cands = [(t, v / params.temperature) for t, v in cands]
        mu = 2 * params.mirostat_tau if mu is None else mu
        probs = softmax(cands)
        if params.mirostat == 1:
            num = den = 0.0
            for i in range(min(99, len(cands) - 1)):
                t_i = math.log((i + 2) / (i + 1))
                num += t_i * math.log(probs[i] / probs[i + 1])
                den += t_i * t_i
            s_hat = num / den
            eps = s_hat - 1
            k = (eps * 2**mu / (1 - len(logits) ** -eps)) ** (1 / s_hat)
            cands = cands[: max(int(k), 1)]
        else:
            keep = len(cands)
            for i, p in enumerate(probs):
                if -math.log2(p) > mu:
                    keep = i
                    break
            cands = cands[: max(keep, 1)]
        i = draw(cands, uniform)
        return cands[i][0], mu - params.mirostat_eta * (-math.log2(softmax(cands)[i]) - params.mirostat_tau)
    if params.top_n_sigma > 0 and len(cands) > 1:
        values = [v for _, v in cands]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        cands = [c for c in cands if c[1] >= max(values) - params.top_n_sigma * std]
    if params.top_k > 0:
        cands = cands[: params.top_k]
    if params.typical_p < 1 and len(cands) > 1:
        probs = softmax(cands)
        entropy = -sum(p * math.log(p) for p in probs)
        order = sorted(range(len(cands)), key=lambda i: (abs(-math.log(probs[i]) - entropy), i))
        total, last = 0.0, len(order)
        for n, i in enumerate(order):
            total += probs[i]
            if total > params.typical_p:
                last = n + 1
                break
        cands = [cands[i] for i in sorted(order[:last])]
    if params.top_p < 1 and len(cands) > 1:
        total = 0.0
        for n, p in enumerate(softmax(cands)):
            total += p
            if total >= params.top_p:
                cands = cands[: n + 1]
                break
    if params.min_p > 0 and len(cands) > 1:
        cands = [c for c in cands if c[1] >= cands[0][1] + math.log(params.min_p)]
    if params.xtc_probability > 0 and len(cands) >= 2 and params.xtc_threshold <= 0.5:
        if xtc_chance <= params.xtc_probability:
            above = [i for i, p in enumerate(softmax(cands)) if p >= params.xtc_threshold]
            if len(above) >= 2:
                cands = cands[above[-1] :]
    temperature = params.temperature
    if params.dynatemp_range > 0 and len(cands) > 1:
        low, high = max(0.0, temperature - params.dynatemp_range), temperature + params.dynatemp_range
        probs = softmax(cands)
        entropy = -sum(p * math.log(p) for p in probs if p > 0)
        temperature = low + (high - low) * (entropy / math.log(len(cands))) ** params.dynatemp_exponent
    cands = cands[:1] if temperature <= 0 else [(t, v / temperature) for t, v in cands]
    return cands[draw(cands, uniform)][0], mu


# ---- the comparisons ----------------------------------------------------------------------------------------


class OneDraw:
    """An RNG whose next draw is known: XTC's chance, the one extra draw the chain makes."""

    def __init__(self, value: float):
        self.value = value

    def random(self) -> float:
        return self.value


CASES = [
    dict(typical_p=0.5),
    dict(typical_p=0.9, top_k=20),
    dict(dynatemp_range=0.5, temperature=0.8),
    dict(dynatemp_range=1.5, dynatemp_exponent=2.0, temperature=1.0, min_p=0.05),
    dict(xtc_probability=0.5, xtc_threshold=0.05),
    dict(xtc_probability=1.0, xtc_threshold=0.02, top_p=0.9),
    dict(top_n_sigma=1.0),
    dict(top_n_sigma=2.0, temperature=0.7, typical_p=0.8),
    dict(mirostat=1, mirostat_tau=3.0, mirostat_eta=0.2),
    dict(mirostat=2, mirostat_tau=4.0, mirostat_eta=0.1, temperature=0.9),
    dict(mirostat=2, temperature=0.0),
]


@pytest.mark.parametrize("case", CASES, ids=[",".join(f"{k}={v}" for k, v in c.items()) for c in CASES])
def test_the_chain_picks_what_llama_cpp_picks(case):
    """Over 60 steps of random logits (a peaked and a flat shape), the same token and mirostat mu."""
    params = SamplingParams(**case).validate(64)
    assert sampling_chain.needs_chain(params)
    rng = np.random.default_rng(len(str(case)))
    mu = mu_ref = None
    for step in range(60):
        scale = 4.0 if step % 2 else 1.0
        logits = (rng.standard_normal(64) * scale).astype(np.float32)  # (V,)
        uniform, chance = float(rng.random()), float(rng.random())
        token, mu = sampling_chain.sample(logits, params, mu, uniform, OneDraw(chance))
        want, mu_ref = reference(logits, params, mu_ref, uniform, chance)
        assert token == want, (step, token, want)
        if params.mirostat:
            assert mu == pytest.approx(mu_ref, rel=1e-5, abs=1e-5)


def test_plain_params_stay_off_the_chain():
    assert not sampling_chain.needs_chain(SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.1))


@pytest.mark.parametrize(
    "field, value",
    [
        ("typical_p", 0.0),
        ("mirostat", 3),
        ("xtc_probability", 1.5),
        ("dynatemp_range", -1.0),
        ("mirostat_eta", -1),
    ],
)
def test_out_of_range_extras_name_the_field(field, value):
    from blazr.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        SamplingParams(**{field: value}).validate(64)


def test_the_sampler_runs_the_chain_per_request_and_carries_mirostat_mu(backend):
    """Through the engine's Sampler on every backend: a mirostat request gets the chain's tokens with its mu
    carried from step to step, a plain request beside it keeps the tokens it gets alone, seeds repeat."""
    from blazr.engine.request import Request
    from blazr.engine.sampling import Sampler, make_rng

    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((2, 64)) * 3).astype(np.float32)  # (2, V)
    device_logits = backend.upload(logits, dtype="f32")
    sampler = Sampler(backend)

    def run(with_neighbour: bool) -> tuple[list[int], list[int], float]:
        params = SamplingParams(mirostat=2, mirostat_tau=3.0, seed=11).validate(64)
        miro = Request("m", [0], params, rng=make_rng(11))
        plain = Request("p", [0], SamplingParams(seed=5).validate(64), rng=make_rng(5))
        rows, requests = (device_logits, [miro, plain]) if with_neighbour else (device_logits, [miro])
        if not with_neighbour:
            rows = backend.upload(logits[:1], dtype="f32")
        got = [sampler.sample(rows, requests)[0] for _ in range(12)]
        return [g[0] for g in got], [g[1] for g in got if len(g) > 1], miro.mirostat_mu

    alone, _, mu = run(False)
    together, plain_tokens, mu_together = run(True)
    assert together == alone and mu_together == mu and mu is not None
    draws = make_rng(11)
    want, mu_ref = [], None
    for _ in range(12):
        token, mu_ref = reference(
            logits[0], SamplingParams(mirostat=2, mirostat_tau=3.0), mu_ref, draws.random(), 0.0
        )
        want.append(token)
    assert alone == want and mu == pytest.approx(mu_ref, rel=1e-5)
    plain_alone = Request("p", [0], SamplingParams(seed=5).validate(64), rng=make_rng(5))
    solo = [sampler.sample(backend.upload(logits[1:], dtype="f32"), [plain_alone])[0][0] for _ in range(12)]
    assert plain_tokens == solo


# ---- DRY --------------------------------------------------------------------------------------------------


def dry_reference(logits, last_tokens, multiplier, base, allowed, last_n, breakers):
    """llama.cpp's llama_sampler_dry_apply, step by step (its reversed Z-algorithm included), over `last_tokens`
    (the sequence so far) with single-token breakers."""
    out = logits.copy()
    n_ctx = len(last_tokens) if last_n < 0 else min(len(last_tokens), last_n)
    if multiplier == 0 or base < 1 or last_n == 0 or n_ctx <= allowed:
        return out

    def rat(i):
        return last_tokens[len(last_tokens) - 1 - i]

    rep_limit = n_ctx
    for i in range(n_ctx):
        if rat(i) in breakers:
            rep_limit = i
            break
    if rep_limit < allowed:
        return out
    count = [0] * n_ctx
    last, lt, rt = n_ctx - 1, 0, 0
    for k in range(1, n_ctx):
        if k > rt:
            n = 0
            while n + k < n_ctx and rat(n) == rat(n + k):
                n += 1
            count[last - k] = min(n, rep_limit)
            if n > 0:
                lt, rt = k, k + n - 1
        else:
            p, right = k - lt, rt - k + 1
            if count[last - p] < right:
                count[last - k] = min(count[last - p], rep_limit)
            else:
                i = rt + 1
                while i < n_ctx and rat(i) == rat(i - k):
                    i += 1
                count[last - k] = min(i - k, rep_limit)
                lt, rt = k, i - 1
    longest = {}
    for i in range(n_ctx - 1):
        if count[i] >= allowed:
            token = rat(n_ctx - 2 - i)
            longest[token] = max(longest.get(token, 0), count[i])
    max_exp = int(88.7228391 / math.log(base)) if base > 1.000001 else 0
    for token, length in longest.items():
        if token not in breakers:
            exp = length - allowed
            exp = min(exp, max_exp) if max_exp > 0 else exp
            out[token] -= np.float32(multiplier * base**exp)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_dry_penalties_equal_llama_cpp_s(seed):
    """Random sequences over a 6-token vocabulary (repeats everywhere), random settings and breakers."""
    from blazr.engine.dry import apply_dry

    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 6, size=int(rng.integers(5, 80))).tolist()
    if seed % 3 == 0:
        tokens = tokens[:10] * 4 + tokens[10:]  # a long exact repeat
    logits = rng.standard_normal(6).astype(np.float32)
    multiplier, base = float(rng.uniform(0.2, 2.0)), float(rng.uniform(1.0, 3.0))
    allowed, last_n = int(rng.integers(1, 4)), int(rng.choice([-1, 0, 8, 30]))
    breakers = frozenset(rng.choice(6, size=int(rng.integers(0, 2)), replace=False).tolist())
    got = logits.copy()
    apply_dry(got, tokens, multiplier, base, allowed, last_n, breakers)
    want = dry_reference(logits, tokens, multiplier, base, allowed, last_n, breakers)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_dry_breakers_are_tokens_whose_text_holds_one():
    from blazr.engine.dry import breaker_tokens

    texts = ["hello", "\n", "a:b", "x", '"', "**", "ok"]
    assert breaker_tokens(texts, ["\n", ":", '"', "*"]) == frozenset({1, 2, 4, 5})
    assert breaker_tokens(texts, []) == frozenset()


def test_dry_through_the_sampler_stops_a_greedy_loop(backend):
    """A greedy row whose best token would continue a long repeat picks another once DRY penalises it."""
    from blazr.engine.request import Request
    from blazr.engine.sampling import Sampler, make_rng

    logits = np.zeros((1, 8), dtype=np.float32)
    logits[0, 3] = 2.0  # token 3 is the best choice
    history = [1, 2, 3, 1, 2]  # ... 1 2 3 1 2: emitting 3 would repeat "1 2 3"
    plain = Request("p", history, SamplingParams(temperature=0.0).validate(8), rng=make_rng(0))
    dry = SamplingParams(temperature=0.0, dry_multiplier=3.0, dry_allowed_length=2).validate(8)
    penalised = Request("d", history, dry, rng=make_rng(0))
    sampler = Sampler(backend)
    rows = backend.upload(logits, dtype="f32")
    assert sampler.sample(rows, [plain])[0] == [3]
    assert sampler.sample(rows, [penalised])[0] != [3]
