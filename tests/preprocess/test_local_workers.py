"""A command's local worker pool: leaving it starts the pool's warm shutdown without waiting for it
(on the embedded broker that shutdown is seconds of idle polling), and the process waits for every
such pool before it exits, so none outlives the command."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from services.preprocess import local_workers
from services.preprocess.local_workers import LocalWorkers


def test_leaving_the_pool_returns_while_it_stops_and_the_exit_waits_for_it(reelrl_home) -> None:
    with LocalWorkers(1) as pool:
        pool.check_alive()
        worker = psutil.Process(pool.proc.pid)
        # the pool is up (its prefork child exists) before it is told to stop
        deadline = time.monotonic() + 60
        while not worker.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.children(), "the pool never started its worker process"
    assert pool.proc.poll() is None, "leaving the pool waited for its shutdown"
    assert any(reaper.is_alive() for reaper in local_workers._stopping)
    local_workers.wait_for_stopping_pools()
    assert pool.proc.returncode == 0, "a warm shutdown, not a kill"
    assert not local_workers._stopping


def test_leaving_the_pool_on_an_error_waits_for_it_to_stop(reelrl_home) -> None:
    """A cancelled or failed command does not leave decodes running that nobody needs any more."""
    with pytest.raises(KeyboardInterrupt), LocalWorkers(1) as pool:
        time.sleep(3)
        raise KeyboardInterrupt
    assert pool.proc.poll() is not None, "the pool was still running after the command gave up"


def test_a_process_that_leaves_a_pool_exits_only_after_the_pool(reelrl_home, tmp_path) -> None:
    """However the pool ends (a warm shutdown, or SIGTERM's default before Celery set its handlers),
    the command's process is gone only after it."""
    pid_file = tmp_path / "pool.pid"
    script = textwrap.dedent(f"""
        import time
        from services.preprocess.local_workers import LocalWorkers
        with LocalWorkers(1) as pool:
            time.sleep(3)
        open({str(pid_file)!r}, "w").write(str(pool.proc.pid))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    pool_pid = int(pid_file.read_text())
    assert not psutil.pid_exists(pool_pid) or psutil.Process(pool_pid).status() == psutil.STATUS_ZOMBIE
