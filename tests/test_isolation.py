"""Two test sessions on one machine keep apart (tests/conftest.py): each claims its own Redis database
and temp folder, a suite past its time budget fails the tests it did not reach, saying why, and a test
stuck past its timeout stops the session with every thread's stack."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis

pytestmark = pytest.mark.twin
ROOT = Path(__file__).resolve().parents[1]
CHILD_OUT = "REELRL_TEST_CHILD_OUT"


def claim_holder(db: int) -> bytes | None:
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        return client.get(f"reelrl-test:db-claim:{db}")
    finally:
        client.close()


def child_environment(**env: str) -> dict[str, str]:
    """This environment for a session of its own: no Redis database of this one's, and not an xdist
    worker (the variables pytest-xdist gives this session would make the child's main process one)."""
    mine = (
        "REELRL_TEST_REDIS",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        "REELRL_TEST_RECORD_DURATIONS",  # a child's few tests are not the suite's durations
    )
    return {k: v for k, v in os.environ.items() if k not in mine} | env


def child_session(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = child_environment(**env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_each_session_claims_its_own_redis_database_and_temp_folder(redis_url, tmp_path):
    db = int(redis_url.rsplit("/", 1)[1])
    assert claim_holder(db) == str(os.getpid()).encode(), "the session's database is claimed by this process"
    assert Path(tempfile.gettempdir()).name.startswith(f"rt{os.getpid()}-")
    # wandb's service logs, cache and settings (otherwise in the user's home, shared by every session)
    from wandb import env as wandb_env

    for folder in (wandb_env.get_cache_dir(), wandb_env.get_data_dir(), os.environ[wandb_env.CONFIG_DIR]):
        assert Path(folder).is_relative_to(tempfile.gettempdir()), folder
    if os.environ.get(CHILD_OUT):  # the second session started below: report what it was given
        Path(os.environ[CHILD_OUT]).write_text(f"{redis_url}\n{tempfile.gettempdir()}\n{os.getpid()}")
        return
    out = tmp_path / "child.txt"
    child = child_session(f"{__file__}::{test_each_session_claims_its_own_redis_database_and_temp_folder.__name__}",
                          **{CHILD_OUT: str(out)})  # fmt: skip
    assert child.returncode == 0, child.stdout + child.stderr
    child_url, child_tmp, child_pid = out.read_text().splitlines()
    assert child_url != redis_url, "a second session on the machine got this session's Redis database"
    assert child_tmp != tempfile.gettempdir()
    child_db = int(child_url.rsplit("/", 1)[1])
    # released: another session running beside this one may have claimed it since, but not the child
    assert claim_holder(child_db) != child_pid.encode(), "the finished session released its database"
    assert not Path(child_tmp).exists(), "the finished session removed its temp folder"
    assert claim_holder(db) == str(os.getpid()).encode(), "and this session still holds its own"


def test_a_process_started_elsewhere_imports_this_checkout(tmp_path):
    """The environment is shared by every clone on the machine, and its editable install points at the
    clone that last ran scripts/bootstrap.sh: a test's child started outside the checkout must still
    run the checkout's code."""
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    child = subprocess.run(
        [sys.executable, "-c", "import services; print(services.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert Path(child.stdout.strip()).is_relative_to(ROOT), child.stdout


def test_a_suite_past_its_time_budget_fails_the_tests_it_did_not_reach():
    child = child_session("tests/common/test_coords.py", REELRL_TEST_BUDGET_S="0")
    assert child.returncode == 1, child.stdout + child.stderr
    assert "the suite's time budget is spent" in child.stdout
    assert "REELRL_TEST_BUDGET_S=0" in child.stdout
    assert " passed" not in child.stdout.splitlines()[-1]


def stuck_child_session(name: str, mode: str) -> subprocess.CompletedProcess[str]:
    """This file's test ``name`` alone in a child session told to get stuck (``mode``), with a 1 s
    timeout and 2 s of watchdog grace; the watchdog must end it, failed, well within 45 s."""
    started = time.monotonic()
    child = child_session(
        f"{__file__}::{name}", "-o", "timeout=1", **{CHILD_OUT: mode, "REELRL_TEST_WATCHDOG_GRACE_S": "2"}
    )
    assert time.monotonic() - started < 45, f"the watchdog did not stop the stuck session ({mode})"
    assert child.returncode == 1, child.stdout + child.stderr
    return child


def test_a_test_stuck_where_its_timeout_cannot_reach_stops_the_session_with_its_stack():
    """pytest-timeout's SIGALRM cannot interrupt a thread blocked in C code (simulated here by blocking
    the signal): the conftest's watchdog then ends the session, printing where each thread was."""
    if os.environ.get(CHILD_OUT) == "stuck":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        time.sleep(60)
        return
    name = test_a_test_stuck_where_its_timeout_cannot_reach_stops_the_session_with_its_stack.__name__
    child = stuck_child_session(name, "stuck")
    assert "Timeout (0:00:0" in child.stderr, child.stderr  # at the test's deadline: 1 s + 2 s of grace
    assert f"in {name}" in child.stderr and "test_isolation.py" in child.stderr, child.stderr


@pytest.fixture
def teardown_stuck_in_c():
    yield
    if os.environ.get(CHILD_OUT) == "stuck-teardown":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        time.sleep(60)


def test_a_teardown_stuck_after_a_timed_out_test_is_caught_too(teardown_stuck_in_c):
    """pytest-timeout fails the test (its SIGALRM gets through), pytest's faulthandler plugin then
    cancels the process-wide timer, and the teardown blocks: the watchdog is armed again for it."""
    if os.environ.get(CHILD_OUT) == "stuck-teardown":
        time.sleep(30)  # interrupted by pytest-timeout after 1 s
        return
    child = stuck_child_session(
        test_a_teardown_stuck_after_a_timed_out_test_is_caught_too.__name__, "stuck-teardown"
    )
    assert "(most recent call first)" in child.stderr and "in teardown_stuck_in_c" in child.stderr, (
        child.stderr
    )
