"""Prometheus metrics of the jobs API: requests, latency, and jobs by kind and state (read at scrape)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.common.db import session_scope
from services.common.db.models import Job

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _JobStates(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("reelrl_api_jobs", "jobs by kind and state", labels=["kind", "state"])
        with session_scope() as session:
            for kind, state, n in session.execute(
                select(Job.kind, Job.state, func.count()).group_by(Job.kind, Job.state)
            ):
                gauge.add_metric([kind, str(state)], n)
        yield gauge


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "reelrl_api_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "reelrl_api_request_seconds", "HTTP latency (event streams excluded)", ["route"],
            buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.registry.register(_JobStates())

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, streaming = 500, False

        async def record(message: Message) -> None:
            nonlocal status, streaming
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = dict(message.get("headers", []))
                streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            if not streaming:
                self.metrics.latency.labels(route).observe(time.perf_counter() - started)
