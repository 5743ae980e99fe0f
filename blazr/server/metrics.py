"""Prometheus metrics for one app. Each app owns its CollectorRegistry, so several apps (tests) never clash
over the process-global default registry."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from blazr.server.slo import SloChecker

disable_created_metrics()  # no `_created` series: they double the exposition and nothing here reads them

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Latency buckets in seconds: 1 ms .. 60 s covers a CPU decode step through a long prefill.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
REQUEST_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
RATE_WINDOW = 10.0  # seconds of generated tokens blazr_tokens_per_second averages over


class Metrics:
    """The server's counters, gauges and histograms (names prefixed `blazr_`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests_total = Counter(
            "blazr_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.request_seconds = Histogram(
            "blazr_request_duration_seconds",
            "HTTP request latency",
            ["route"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.tokens_in_total = Counter("blazr_tokens_prompted", "Prompt tokens", ["model"], registry=r)
        self.tokens_out_total = Counter("blazr_tokens_generated", "Generated tokens", ["model"], registry=r)
        self.cached_tokens_total = Counter(
            "blazr_prefix_cache_hit_tokens",
            "Prompt tokens served from the prefix cache",
            ["model"],
            registry=r,
        )
        self.ttft_seconds = Histogram(
            "blazr_time_to_first_token_seconds", "Time to first token", buckets=TTFT_BUCKETS, registry=r
        )
        self.itl_seconds = Histogram(
            "blazr_inter_token_latency_seconds",
            "Time between streamed tokens",
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "blazr_queue_depth", "Generation requests admitted and not finished", registry=r
        )
        self.loaded_models = Gauge("blazr_models_loaded", "Models loaded in memory", registry=r)
        self.models_available = Gauge(
            "blazr_scheduler_models_available",
            "Models in the model directory (recounted every 30 s)",
            registry=r,
        )
        self.models_counted_at = -float("inf")  # when /metrics last listed the model directory
        self.model_loads_total = Counter("blazr_scheduler_loads", "Model loads", registry=r)
        self.model_evictions_total = Counter("blazr_scheduler_evictions", "Model evictions", registry=r)
        # The generation engines' state, read at each scrape (vLLM's num_requests_running / _waiting and KV
        # usage): how full the paged KV pool is and how many sequences run or wait, per loaded model
        self.kv_blocks_used = Gauge(
            "blazr_kv_cache_blocks_used", "KV cache blocks held by sequences", ["model"], registry=r
        )
        self.kv_blocks_total = Gauge(
            "blazr_kv_cache_blocks", "KV cache blocks in the pool", ["model"], registry=r
        )
        self.kv_handoff_tokens = Gauge(
            "blazr_kv_handoff_tokens",
            "Prompt tokens whose KV went from a prefill replica to a decode replica (blazr disagg), since start",
            ["model"],
            registry=r,
        )
        self.kv_handoff_seconds = Gauge(
            "blazr_kv_handoff_seconds",
            "Seconds spent exporting handed-over KV on prefill replicas and loading it on decode replicas",
            ["model"],
            registry=r,
        )
        self.kv_utilization = Gauge(
            "blazr_kv_cache_utilization_ratio",
            "Share of the KV cache pool's blocks held by sequences (0..1)",
            ["model"],
            registry=r,
        )
        self.running = Gauge(
            "blazr_num_requests_running", "Sequences in the engine's running batch", ["model"], registry=r
        )
        self.waiting = Gauge(
            "blazr_num_requests_waiting", "Sequences waiting for the engine (queued or preempted)", ["model"],
            registry=r,
        )  # fmt: skip
        self.requests_active = Gauge("blazr_requests_active", "HTTP requests being handled", registry=r)
        self.tokens_per_second = Gauge(
            "blazr_tokens_per_second",
            f"Generated tokens per second over the last {RATE_WINDOW:g} s",
            registry=r,
        )
        self.inflight_tokens = Gauge(
            "blazr_inflight_tokens", "Prompt plus max_tokens of the admitted generation requests", registry=r
        )
        self.token_budget = Gauge(
            "blazr_token_budget_utilization_ratio",
            "inflight tokens / server.max_inflight_tokens (only when a budget is set)",
            registry=r,
        )
        self.decode_slots = Gauge(
            "blazr_active_decode_slots", "Sequences decoding together, all models", registry=r
        )
        self.prefix_hits = Counter(
            "blazr_prefix_cache_hits", "Generation requests whose prompt began in the prefix cache", ["model"],
            registry=r,
        )  # fmt: skip
        self.prefix_misses = Counter(
            "blazr_prefix_cache_misses", "Generation requests whose prompt found nothing cached", ["model"],
            registry=r,
        )  # fmt: skip
        self.slo_violations = Counter(
            "blazr_slo_violations",
            "Checks of a rolling latency window that missed its server.slo_* target",
            ["metric", "percentile"],
            registry=r,
        )
        self.spec_drafted = Gauge(
            "blazr_spec_decode_draft_tokens",
            "Draft tokens proposed since the model loaded",
            ["model"],
            registry=r,
        )
        self.spec_accepted = Gauge(
            "blazr_spec_decode_accepted_tokens", "Draft tokens the model accepted", ["model"], registry=r
        )
        self.spec_acceptance = Gauge(
            "blazr_spec_decode_acceptance_ratio", "accepted / drafted tokens", ["model"], registry=r
        )
        self._generated: deque[tuple[float, int]] = deque()  # (monotonic time, tokens) of recent requests
        self.slo = SloChecker({}, self.slo_violations)  # no targets until the app sets server.slo_*

    def note_generated(self, tokens: int) -> None:
        """Count tokens into the rolling tokens-per-second window (older entries go, scraped or not)."""
        if tokens:
            self._generated.append((time.monotonic(), tokens))
            self._prune()

    def _prune(self) -> None:
        cutoff = time.monotonic() - RATE_WINDOW
        while self._generated and self._generated[0][0] < cutoff:
            self._generated.popleft()

    def observe_admission(self, tokens: int, budget: int) -> None:
        """The in-flight token gauges from the admission's count and its budget (0: none)."""
        self.inflight_tokens.set(tokens)
        if budget:
            self.token_budget.set(tokens / budget)

    def _observe_rate(self) -> None:
        self._prune()
        self.tokens_per_second.set(sum(n for _, n in self._generated) / RATE_WINDOW)

    def observe_engines(
        self, engines: dict[str, Any], counted: dict[str, dict[str, int]] | None = None
    ) -> None:
        """Set the engine gauges from each generation model's Engine (name -> blazr.engine.Engine), and from
        counts gathered elsewhere (name -> engine_counts' keys: a swarm model's replicas, summed); models no
        longer loaded drop out. Plain reads of the engine thread's counters: a scrape sees one recent step."""
        gauges = (self.kv_blocks_used, self.kv_blocks_total, self.kv_utilization, self.running, self.waiting)
        gauges += (self.spec_drafted, self.spec_accepted, self.spec_acceptance)
        gauges += (self.kv_handoff_tokens, self.kv_handoff_seconds)
        for gauge in gauges:
            gauge.clear()
        counts = {name: engine_counts(engine) for name, engine in engines.items()} | (counted or {})
        self.decode_slots.set(sum(c["running"] for c in counts.values()))
        self._observe_rate()
        for name, c in counts.items():
            used, total = c["kv_blocks_used"], c["kv_blocks_total"]
            self.kv_blocks_used.labels(name).set(used)
            self.kv_blocks_total.labels(name).set(total)
            self.kv_utilization.labels(name).set(used / total if total else 0.0)
            self.running.labels(name).set(c["running"])
            self.waiting.labels(name).set(c["waiting"])
            if "handoff_tokens" in c:  # disaggregated prefill and decode
                self.kv_handoff_tokens.labels(name).set(c["handoff_tokens"])
                self.kv_handoff_seconds.labels(name).set(c["handoff_seconds"])
        for name, engine in engines.items():
            stats = getattr(engine, "spec_stats", None)
            if stats is not None:  # speculative decoding on for this model
                self.spec_drafted.labels(name).set(stats.drafted)
                self.spec_accepted.labels(name).set(stats.accepted)
                self.spec_acceptance.labels(name).set(stats.acceptance_rate)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


def engine_counts(engine: Any) -> dict[str, int]:
    """An Engine's running and waiting sequences and KV blocks (in use, total)."""
    return {
        "running": len(engine.scheduler.running),
        "waiting": len(engine.scheduler.waiting),
        "kv_blocks_used": engine.pool.num_blocks - engine.pool.num_free,
        "kv_blocks_total": engine.pool.num_blocks,
    }
