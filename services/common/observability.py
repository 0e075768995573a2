"""Prometheus ``/metrics`` for the processes that serve no HTTP of their own: queue workers and the trainer.

A process started with ``REELRL_METRICS_PORT`` set serves its metrics on that port (bound to
``REELRL_METRICS_HOST``, loopback unless set); without it nothing is started. Metric names are the ones the
Grafana dashboard (``deploy/grafana/``) queries:

- queue workers: ``reelrl_worker_tasks_total{queue,task,state}`` (finished tasks by final Celery state),
  ``reelrl_worker_task_seconds{queue,task}`` (run time histogram), ``reelrl_worker_tasks_active{queue}``;
- trainer: ``reelrl_trainer_step`` (last finished step) and ``reelrl_trainer_metric{key}``, the latest
  value of every key the step wrote to ``metrics.jsonl`` (``reward/accuracy``, ``timing/gen_s``, …).

A Celery worker runs its tasks in forked pool processes, so worker metrics use prometheus_client's
multiprocess mode: each pool process writes its samples to files in one folder and the exporter in the
main process sums them, whichever child ran the task.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.settings import Settings, get_settings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Decoding one clip takes from milliseconds (cached) to minutes (long videos on one core).
_TASK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_LIVE_GAUGE_FILE = re.compile(r"^gauge_live\w+?_(\d+)\.db$")
# One exporter per process (one port): a training run inside a worker joins the worker's.
_lock = threading.Lock()
_exporter: MetricsServer | None = None
_trainer: TrainerMetrics | None = None


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint (a daemon thread); ``close`` stops it."""

    host: str
    port: int
    _httpd: Any

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def start_exporter(registry: Any, port: int, host: str) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` (port 0: any free port, read it back from the result)."""
    from prometheus_client import start_http_server

    httpd, _thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(host=host, port=httpd.server_port, _httpd=httpd)


class WorkerMetrics:
    """Task counters, run times and in-flight tasks of a Celery worker, fed by Celery's task signals."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        # A private registry: in multiprocess mode the exporter reads the files, not a registry, and a
        # second instance (tests) must not collide with the first in the global one.
        registry = registry if registry is not None else CollectorRegistry()
        self.tasks = Counter(
            "reelrl_worker_tasks",
            "tasks finished, by final state",
            ["queue", "task", "state"],
            registry=registry,
        )
        self.seconds = Histogram(
            "reelrl_worker_task_seconds", "task run time", ["queue", "task"],
            buckets=_TASK_BUCKETS, registry=registry,
        )  # fmt: skip
        self.active = Gauge(
            "reelrl_worker_tasks_active", "tasks running now", ["queue"],
            multiprocess_mode="livesum", registry=registry,
        )  # fmt: skip
        self._started: dict[str, tuple[float, str]] = {}
        self._uid = f"reelrl-worker-metrics-{id(self)}"

    def connect(self) -> None:
        """Listen to the task signals (in a prefork worker: before the pool forks, so children inherit it)."""
        from celery import signals

        signals.task_prerun.connect(self._on_prerun, weak=False, dispatch_uid=self._uid)
        signals.task_postrun.connect(self._on_postrun, weak=False, dispatch_uid=self._uid)

    def disconnect(self) -> None:
        from celery import signals

        signals.task_prerun.disconnect(dispatch_uid=self._uid)
        signals.task_postrun.disconnect(dispatch_uid=self._uid)

    def _on_prerun(self, task_id: str, task: Any, **_: Any) -> None:
        queue = _queue_of(task)
        self._started[task_id] = (time.perf_counter(), queue)
        self.active.labels(queue).inc()

    def _on_postrun(self, task_id: str, task: Any, state: str | None = None, **_: Any) -> None:
        started = self._started.pop(task_id, None)
        queue = started[1] if started else _queue_of(task)
        self.tasks.labels(queue, task.name, (state or "unknown").lower()).inc()
        if started is not None:
            self.seconds.labels(queue, task.name).observe(time.perf_counter() - started[0])
            self.active.labels(queue).dec()


def _queue_of(task: Any) -> str:
    info = getattr(task.request, "delivery_info", None) or {}
    return info.get("routing_key") or "unknown"


class TrainerMetrics:
    """The trainer's per-step metrics: call ``observe_step`` with each row it writes to ``metrics.jsonl``."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        # "mostrecent": inside a queue worker these are summed from files with the pool's metrics.
        self.step = Gauge(
            "reelrl_trainer_step", "last finished training step",
            multiprocess_mode="mostrecent", registry=registry,
        )  # fmt: skip
        self.values = Gauge(
            "reelrl_trainer_metric", "latest value of each metrics.jsonl key", ["key"],
            multiprocess_mode="mostrecent", registry=registry,
        )  # fmt: skip

    def observe_step(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Publish one step's numbers. A key that is None (not measured at this step, e.g. ``val/*``
        between evaluations) keeps its last value; anything else that is not a number is refused."""
        for key, value in metrics.items():
            if key == "step" or value is None:
                continue
            if not isinstance(value, int | float):
                raise TypeError(
                    f"trainer metric {key!r} at step {step} is {type(value).__name__}, not a number"
                )
            self.values.labels(key).set(float(value))
        self.step.set(step)


def serve_trainer_metrics(settings: Settings | None = None) -> TrainerMetrics | None:
    """The process's trainer metrics, served on ``REELRL_METRICS_PORT`` (None when it is unset).

    Inside ``reelrl worker train`` they join the worker's exporter; a later run in the same process gets
    the same metrics back (its values overwrite the previous run's).
    """
    global _exporter, _trainer
    settings = settings or get_settings()
    if settings.metrics_port is None:
        return None
    with _lock:
        if _trainer is None:
            if _exporter is None:
                from prometheus_client import CollectorRegistry

                registry = CollectorRegistry()
                _trainer = TrainerMetrics(registry)
                _exporter = start_exporter(registry, settings.metrics_port, settings.metrics_host)
            else:  # a worker's exporter, which reads every metric of its processes from their files
                _trainer = TrainerMetrics()
        return _trainer


class _LiveProcessCollector:
    """Sums the pool processes' files, first dropping the in-flight gauges of processes that are gone.

    A pool process that is killed or recycles itself mid-task (``os._exit``) never reports its exit, and
    its "running" count would otherwise stay in the sum forever.
    """

    def __init__(self, folder: Path) -> None:
        from prometheus_client import multiprocess

        self._folder = folder
        self._collector = multiprocess.MultiProcessCollector(None, path=str(folder))

    def collect(self) -> Iterator[Any]:
        from prometheus_client import multiprocess

        for pid in _dead_pids(self._folder):
            multiprocess.mark_process_dead(pid, str(self._folder))
        return self._collector.collect()


def _dead_pids(folder: Path) -> set[int]:
    pids = set()
    for path in folder.iterdir():
        match = _LIVE_GAUGE_FILE.match(path.name)
        if match and not _alive(int(match.group(1))):
            pids.add(int(match.group(1)))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def multiprocess_folder() -> Path:
    """The folder pool processes write their samples to: ``PROMETHEUS_MULTIPROC_DIR`` or a fresh one.

    Must run before prometheus_client is first imported: the library picks its storage at import time.
    """
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="reelrl-worker-metrics-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ[MULTIPROC_ENV] = str(folder)  # inherited by the pool processes
    from prometheus_client import values

    if values.ValueClass is values.MutexValue:
        raise RuntimeError(
            "prometheus_client was imported before the worker's metrics folder was chosen, so each pool "
            f"process would keep its metrics to itself; set {MULTIPROC_ENV} or start the exporter first"
        )
    return folder


def serve_worker_metrics(settings: Settings | None = None) -> MetricsServer | None:
    """Start a Celery worker's exporter if ``REELRL_METRICS_PORT`` is set (call before the worker starts)."""
    global _exporter
    settings = settings or get_settings()
    if settings.metrics_port is None:
        return None
    with _lock:
        if _exporter is not None:
            raise RuntimeError(f"this process already serves metrics on port {_exporter.port}")
        folder = multiprocess_folder()
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry()
        registry.register(_LiveProcessCollector(folder))
        _exporter = start_exporter(registry, settings.metrics_port, settings.metrics_host)
    WorkerMetrics().connect()
    return _exporter
