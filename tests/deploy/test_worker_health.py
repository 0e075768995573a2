"""`reelrl worker ping`, the health check of the queue workers in docker-compose.yml and the k8s overlays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from services.cli import app

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_ping_answers_while_the_worker_runs_and_fails_without_it(reelrl_home):
    # The embedded broker keeps this worker private to the test (the health check does not depend on it).
    runner = CliRunner()
    env = {**os.environ, "PYTHONWARNINGS": "ignore:You're running the worker with superuser privileges"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "worker", "preprocess", "-c", "1"],
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        result = runner.invoke(app, ["worker", "ping", "--timeout", "2"])
        while result.exit_code != 0 and time.monotonic() < deadline:
            assert worker.poll() is None, f"worker exited with {worker.returncode}"
            result = runner.invoke(app, ["worker", "ping", "--timeout", "2"])
        assert result.exit_code == 0, result.output
        assert "answered" in result.output
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    result = runner.invoke(app, ["worker", "ping", "--timeout", "1"])
    assert result.exit_code == 1
    assert "did not answer" in result.output
