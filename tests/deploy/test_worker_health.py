"""`reelrl worker preprocess` as the compose file and the k8s overlays run it: with its exporter, probed by
`reelrl worker ping`, scraped on /metrics (the sums of what its pool processes ran)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from services.cli import app
from services.common.celery_app import make_celery
from services.common.db.engine import ensure_schema
from services.common.settings import get_settings, reset_settings_cache

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_worker_answers_pings_and_exports_its_pool_metrics(reelrl_home, monkeypatch):
    # The embedded broker keeps this worker and its queue private to the test (neither the health check
    # nor the exporter depends on the broker).
    port = _free_port()
    monkeypatch.setenv("REELRL_METRICS_PORT", str(port))
    reset_settings_cache()
    ensure_schema()  # as the one-shot migration does: pool processes do not race to create tables
    runner = CliRunner()
    env = {**os.environ, "PYTHONWARNINGS": "ignore:You're running the worker with superuser privileges"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "worker", "preprocess", "-c", "2"],
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        ping = runner.invoke(app, ["worker", "ping", "--timeout", "2"])
        while ping.exit_code != 0 and time.monotonic() < deadline:
            assert worker.poll() is None, f"worker exited with {worker.returncode}"
            ping = runner.invoke(app, ["worker", "ping", "--timeout", "2"])
        assert ping.exit_code == 0, ping.output
        assert "answered" in ping.output

        celery = make_celery(get_settings())
        key = f"missing-{uuid.uuid4().hex}"
        for _ in range(3):  # an unknown clip: the task finishes at once, reporting it
            celery.send_task("reelrl.preprocess.clip", args=[key], queue="preprocess")
        labels = frozenset({("queue", "preprocess"), ("task", "reelrl.preprocess.clip")})
        succeeded = ("reelrl_worker_tasks_total", labels | {("state", "success")})
        samples: dict = {}
        while time.monotonic() < deadline and samples.get(succeeded) != 3:
            with contextlib.suppress(OSError):
                samples = _scrape(port)
            time.sleep(0.5)
        assert samples.get(succeeded) == 3
        finished = sum(
            v for (name, ls), v in samples.items() if name == "reelrl_worker_tasks_total" and labels < ls
        )
        assert samples[("reelrl_worker_task_seconds_count", labels)] == finished
        assert samples[("reelrl_worker_tasks_active", frozenset({("queue", "preprocess")}))] == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    # stopped, it took its record away: nothing on this host answers for it
    ping = runner.invoke(app, ["worker", "ping", "--timeout", "1"])
    assert ping.exit_code == 1
    assert "no `reelrl worker` runs on this host" in ping.output
