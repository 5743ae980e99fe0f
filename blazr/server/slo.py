"""Latency service-level objectives: `server.slo_*_ms` targets checked against rolling windows of the server's
own latencies (time to first token, inter-token latency, end to end per generation request).

Each metric keeps its last WINDOW samples. Once a window holds MIN_SAMPLES, every CHECK_EVERY-th new sample
checks that metric's configured percentiles: each one over its target counts once in
`blazr_slo_violations_total{metric, percentile}` and logs an "SLO violation" warning. Checking every
CHECK_EVERY samples (not every sample) keeps the per-token cost flat and makes the counter count windows
out of bounds rather than tokens.
"""

from __future__ import annotations

import logging
from collections import deque

import numpy as np

WINDOW = 1000  # samples per metric (features.md: rolling 1,000-sample windows)
MIN_SAMPLES = 100  # no verdict on fewer
CHECK_EVERY = 100
METRICS = ("ttft", "itl", "e2e")
PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0}

log = logging.getLogger("blazr.server")


class SloChecker:
    """Rolling latency windows and the configured targets: {(metric, percentile): seconds}."""

    def __init__(self, targets: dict[tuple[str, str], float], violations=None):
        self.targets = targets
        self.violations = violations  # the Counter blazr_slo_violations_total (labels metric, percentile)
        self.windows = {m: deque(maxlen=WINDOW) for m in METRICS}
        self.seen = dict.fromkeys(METRICS, 0)

    @classmethod
    def from_settings(cls, server, violations=None) -> SloChecker:
        """Targets from ServerSettings' slo_<metric>_<percentile>_ms fields (unset ones are not checked)."""
        targets = {}
        for metric in METRICS:
            for name in PERCENTILES:
                value = getattr(server, f"slo_{metric}_{name}_ms", None)
                if value is not None:
                    targets[(metric, name)] = value / 1000.0
        return cls(targets, violations)

    def record(self, metric: str, seconds: float) -> None:
        window = self.windows[metric]
        window.append(seconds)
        self.seen[metric] += 1
        if len(window) >= MIN_SAMPLES and self.seen[metric] % CHECK_EVERY == 0:
            self.check(metric)

    def check(self, metric: str) -> list[tuple[str, float, float]]:
        """(percentile, observed seconds, target seconds) of each target of `metric` its window misses."""
        missed = []
        values = np.asarray(self.windows[metric], dtype=np.float64)  # (n,)
        for (name_metric, name), target in self.targets.items():
            if name_metric != metric or len(values) < MIN_SAMPLES:
                continue
            observed = float(np.percentile(values, PERCENTILES[name]))
            if observed > target:
                missed.append((name, observed, target))
                if self.violations is not None:
                    self.violations.labels(metric, name).inc()
                log.warning(
                    "SLO violation: %s %s is %.1f ms over the last %d samples (target %.1f ms)",
                    metric, name, observed * 1000, len(values), target * 1000,
                )  # fmt: skip
        return missed
