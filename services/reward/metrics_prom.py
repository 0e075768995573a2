"""Prometheus metrics of the reward service: requests, latency, items by type, item errors.

With several uvicorn workers, ``PROMETHEUS_MULTIPROC_DIR`` (set by ``serve_reward``) makes every worker
write its samples there and ``/metrics`` aggregate all workers, whichever one answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

from services.reward.result import RewardResult

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class RewardMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "reelrl_reward_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "reelrl_reward_request_seconds", "HTTP request latency", ["route"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.items = Counter("reelrl_reward_items", "items scored", ["problem_type"], registry=self.registry)
        self.item_errors = Counter(
            "reelrl_reward_item_errors",
            "items that could not be scored",
            ["problem_type"],
            registry=self.registry,
        )

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_items(self, results: Iterable[RewardResult]) -> None:
        for result in results:
            kind = result.problem_type or "unknown"
            self.items.labels(kind).inc()
            if result.error is not None:
                self.item_errors.labels(kind).inc()

    def render(self) -> tuple[bytes, str]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
