"""Stopping `reelrl serve api` is its normal end: exit 0 after SIGTERM, 130 after Ctrl-C (SIGINT),
after a graceful shutdown (uvicorn re-raised the signal, so a clean `kill` exited 143)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_stopped_api_exits_cleanly(reelrl_home, sig, status):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", "api", "--port", str(port)],
        env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not come up"
            time.sleep(0.2)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, output[-2000:]
    assert "Application shutdown complete" in output
