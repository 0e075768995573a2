"""Start and stop `celery worker` processes for the duration of one command."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from services.common.settings import Settings

#: a stopping pool's longest warm shutdown before it is killed (its tasks are idempotent: a killed
#: decode is claimed again under its lapsed lease)
STOP_WAIT_S = 20.0
#: reapers of pools whose warm shutdown goes on in the background: joined when the process exits
_stopping: list[threading.Thread] = []
_stopping_lock = threading.Lock()


def _reap(proc: subprocess.Popen, timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@atexit.register
def wait_for_stopping_pools() -> None:
    """Wait for every pool still in its warm shutdown (a process exits only after its workers)."""
    with _stopping_lock:
        reapers, _stopping[:] = list(_stopping), []
    for reaper in reapers:
        reaper.join()


class WorkerPoolDied(RuntimeError):
    """The local worker processes exited while the command still needed them."""


def worker_log(settings: Settings, queue: str = "preprocess") -> Path:
    """Where a command's local workers write their log (kept out of the command's own output)."""
    return settings.home / "logs" / f"{queue}-workers.log"


class LocalWorkers:
    """``n`` prefork worker processes on the configured broker, told to stop (warm shutdown) on exit.

    ``include`` names the tasks module the workers import (the shared app knows no service).
    Their output (Celery's banner-less log, "Warm shutdown", task warnings) is appended to
    ``log_file`` when given, so it does not interleave with the command's progress bar and summary.
    """

    def __init__(
        self,
        n: int,
        queue: str = "preprocess",
        loglevel: str = "WARNING",
        *,
        include: str = "services.preprocess.tasks",
        log_file: Path | None = None,
    ) -> None:
        self.n, self.queue, self.loglevel, self.include, self.log_file = n, queue, loglevel, include, log_file
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LocalWorkers:
        if self.n <= 0:
            return self
        cmd = [
            sys.executable, "-m", "celery", "-A", "services.common.celery_app", "--quiet", "worker",
            "-Q", self.queue, "-c", str(self.n), "-P", "prefork", "-I", self.include,
            "-n", f"reelrl-{self.queue}-{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", self.loglevel,
        ]  # fmt: skip
        env = os.environ.copy()
        # Containers and CI run as root; Celery's warning about it would bury the progress bar.
        quiet = "ignore:You're running the worker with superuser privileges"
        env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), quiet]))
        out = None
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            # The child keeps its own copy of the descriptor; ours is closed once it has started.
            out = open(self.log_file, "ab")
        try:
            self.proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=out, stderr=out)
        finally:
            if out is not None:
                out.close()
        return self

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            where = f" (its log: {self.log_file})" if self.log_file else ""
            raise WorkerPoolDied(f"local celery worker exited with code {self.proc.returncode}{where}")

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """After the command got what it waited for, the pool's warm shutdown goes on in the background:
        on the embedded broker it takes ~6 s of idle polling (Celery's loop looks for a shutdown every
        2 s, then the pool's threads wind down), twice in every trainer start (training and validation
        splits). A reaper thread waits for it (at most ``STOP_WAIT_S``, then kills the group) and the
        process joins the reapers at exit. Leaving on an error (a cancelled job, an interrupt) still
        waits here: decodes may be under way that nobody needs any more."""
        self.stop(wait=exc_type is not None)

    def stop(self, *, wait: bool = True) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        if wait:
            _reap(self.proc, STOP_WAIT_S)
            return
        reaper = threading.Thread(
            target=_reap, args=(self.proc, STOP_WAIT_S), name=f"reap-{self.queue}-pool", daemon=True
        )
        reaper.start()
        with _stopping_lock:
            _stopping[:] = [r for r in _stopping if r.is_alive()]
            _stopping.append(reaper)
