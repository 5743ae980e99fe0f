"""Prometheus metrics for one app. Each app owns its CollectorRegistry, so several apps (tests) never clash
over the process-global default registry."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

disable_created_metrics()  # no `_created` series: they double the exposition and nothing here reads them

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Latency buckets in seconds: 1 ms .. 60 s covers a CPU decode step through a long prefill.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
REQUEST_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


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
        self.model_loads_total = Counter("blazr_scheduler_loads", "Model loads", registry=r)
        self.model_evictions_total = Counter("blazr_scheduler_evictions", "Model evictions", registry=r)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
