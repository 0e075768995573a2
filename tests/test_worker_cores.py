"""Under pytest-xdist each worker session runs on cores of its own (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import worker_cores
from tests.test_isolation import CHILD_OUT, ROOT, child_environment


@pytest.mark.parametrize("item", range(6))
def test_each_xdist_worker_runs_on_cores_of_its_own(item: int, tmp_path: Path) -> None:
    """Two sessions' vLLM engines bind their OpenMP threads to cores picked from the allowed set; left
    unpinned, both picked the same core. Under pytest-xdist each worker keeps to its own cores."""
    report = os.environ.get(CHILD_OUT)
    if report:  # a test of the two-worker child session below: which worker ran it, on which cores
        worker = os.environ["PYTEST_XDIST_WORKER"]
        Path(report, f"{worker}-{item}").write_text(" ".join(map(str, sorted(os.sched_getaffinity(0)))))
        return
    if item:  # the parent runs the check once
        return
    cores = sorted(range(os.cpu_count() or 1))
    name = test_each_xdist_worker_runs_on_cores_of_its_own.__name__
    environ = child_environment(**{CHILD_OUT: str(tmp_path)})
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist", "load",
         f"{__file__}::{name}"],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),  # as an unpinned session starts it
    )  # fmt: skip
    assert child.returncode == 0, child.stdout + child.stderr
    seen = {p.name.split("-")[0]: [int(c) for c in p.read_text().split()] for p in tmp_path.iterdir()}
    assert sorted(seen) == ["gw0", "gw1"], seen  # six tests spread over both workers
    for worker, mask in seen.items():
        assert mask == worker_cores(cores, worker, 2), (worker, mask)
    if len(cores) >= 2:
        assert not set(seen["gw0"]) & set(seen["gw1"]), seen
