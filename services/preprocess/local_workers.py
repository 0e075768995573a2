"""Start and stop `celery worker` processes for the duration of one command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid


class LocalWorkers:
    """``n`` prefork worker processes on the configured broker, stopped (warm shutdown) on exit."""

    def __init__(self, n: int, queue: str = "preprocess", loglevel: str = "WARNING") -> None:
        self.n, self.queue, self.loglevel = n, queue, loglevel
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LocalWorkers:
        if self.n <= 0:
            return self
        cmd = [
            sys.executable, "-m", "celery", "-A", "services.common.celery_app", "--quiet", "worker",
            "-Q", self.queue, "-c", str(self.n), "-P", "prefork",
            "-n", f"reelrl-{self.queue}-{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", self.loglevel,
        ]  # fmt: skip
        env = os.environ.copy()
        # Containers and CI run as root; Celery's warning about it would bury the progress bar.
        quiet = "ignore:You're running the worker with superuser privileges"
        env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), quiet]))
        self.proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        return self

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"local celery worker exited with code {self.proc.returncode}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
