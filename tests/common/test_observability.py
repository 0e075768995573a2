"""Exporters of queue workers and the trainer: the metric values, the endpoint, the pool-process sums."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from celery import Celery
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from services.common.observability import (
    TrainerMetrics,
    WorkerMetrics,
    _LiveProcessCollector,
    start_exporter,
)


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def test_trainer_step_metrics_keep_the_latest_value_of_each_key():
    registry = CollectorRegistry()
    metrics = TrainerMetrics(registry)
    metrics.observe_step(1, {"step": 1, "reward/accuracy": 0.25, "val/accuracy": 0.5, "timing/gen_s": 3})
    metrics.observe_step(2, {"step": 2, "reward/accuracy": 0.75, "timing/gen_s": 2.5, "val/accuracy": None})

    def value(key: str) -> float | None:
        return registry.get_sample_value("reelrl_trainer_metric", {"key": key})

    assert registry.get_sample_value("reelrl_trainer_step") == 2
    assert value("reward/accuracy") == 0.75
    assert value("timing/gen_s") == 2.5
    assert value("val/accuracy") == 0.5  # measured at step 1 only: kept until the next evaluation
    assert value("step") is None


def test_trainer_metric_that_is_not_a_number_is_refused_by_name():
    metrics = TrainerMetrics(CollectorRegistry())
    with pytest.raises(TypeError, match=r"'reward/accuracy' at step 7 is str"):
        metrics.observe_step(7, {"reward/accuracy": "0.5"})


def test_exporter_serves_the_registry():
    registry = CollectorRegistry()
    TrainerMetrics(registry).observe_step(4, {"reward/format": 1.0})
    server = start_exporter(registry, 0, "127.0.0.1")
    try:
        samples = _samples(_scrape(server.port))
    finally:
        server.close()
    assert samples[("reelrl_trainer_step", frozenset())] == 4
    assert samples[("reelrl_trainer_metric", frozenset({("key", "reward/format")}))] == 1.0


def test_worker_metrics_count_tasks_by_queue_and_state():
    app = Celery("observability-test", broker="memory://", set_as_current=False)

    @app.task(name="t.ok")
    def ok() -> str:
        return "done"

    @app.task(name="t.boom")
    def boom() -> None:
        raise ValueError("boom")

    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.connect()
    try:
        ok.apply(routing_key="q1")
        ok.apply(routing_key="q1")
        boom.apply(routing_key="q2")
    finally:
        metrics.disconnect()
    ok.apply(routing_key="q1")  # after disconnect: not counted

    def get(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert get("reelrl_worker_tasks_total", queue="q1", task="t.ok", state="success") == 2
    assert get("reelrl_worker_tasks_total", queue="q2", task="t.boom", state="failure") == 1
    assert get("reelrl_worker_task_seconds_count", queue="q1", task="t.ok") == 2
    assert get("reelrl_worker_tasks_active", queue="q1") == 0
    assert get("reelrl_worker_tasks_active", queue="q2") == 0


_GAUGE_CHILD = textwrap.dedent(
    """
    import os, sys
    from prometheus_client import Gauge
    Gauge("running", "in-flight", multiprocess_mode="livesum").inc()
    print(os.getpid(), flush=True)
    if sys.argv[1] == "stay":
        sys.stdin.read()
    os._exit(0)  # like a pool process recycled mid-task: no clean-up of its files
    """
)


def test_pool_collector_drops_the_in_flight_count_of_dead_processes(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    gone = subprocess.run(
        [sys.executable, "-c", _GAUGE_CHILD, "exit"], env=env, capture_output=True, text=True, check=True
    )
    staying = subprocess.Popen(
        [sys.executable, "-c", _GAUGE_CHILD, "stay"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        staying_pid = int(staying.stdout.readline())
        assert {p.name for p in tmp_path.iterdir()} == {
            f"gauge_livesum_{int(gone.stdout)}.db",
            f"gauge_livesum_{staying_pid}.db",
        }
        families = {f.name: f for f in _LiveProcessCollector(tmp_path).collect()}
        assert [s.value for s in families["running"].samples] == [1.0]
        assert {p.name for p in tmp_path.iterdir()} == {f"gauge_livesum_{staying_pid}.db"}
    finally:
        staying.communicate("")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_WORKER_WITH_TRAINER = textwrap.dedent(
    """
    import urllib.request
    from services.common.observability import serve_trainer_metrics, serve_worker_metrics
    server = serve_worker_metrics()
    first = serve_trainer_metrics()
    first.observe_step(5, {"reward/accuracy": 0.5})
    assert serve_trainer_metrics() is first  # a second run in this worker: the same metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
        print(response.read().decode())
    """
)


def test_training_inside_a_worker_is_served_by_the_workers_exporter(reelrl_home):
    """`reelrl worker train` runs training in its own process: one port, one exporter for both."""
    env = {**os.environ, "REELRL_METRICS_PORT": str(_free_port())}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", _WORKER_WITH_TRAINER], env=env, capture_output=True, text=True, check=True
    ).stdout
    samples = _samples(out)
    assert samples[("reelrl_trainer_step", frozenset())] == 5
    assert samples[("reelrl_trainer_metric", frozenset({("key", "reward/accuracy")}))] == 0.5
