"""Fixtures shared by every test: an isolated REELRL_HOME, real Postgres and Redis, synthetic videos.

Postgres and Redis are part of the test environment (scripts/test.sh starts or checks them). A test
that needs one and cannot reach it fails with the reason; nothing is skipped.

Two test sessions may run side by side on one machine, so a session touches only what it made: its own
temp folder (``TMPDIR``, which the processes it starts inherit), its own Redis database (claimed for
the session, see :func:`_claim_redis_db`), a private Postgres schema per test, and leak checks that
look at the segments its own processes map (:func:`own_shm_segments`).
"""

from __future__ import annotations

import faulthandler
import getpass
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from services.common.settings import reset_settings_cache

PG_BASE = os.environ.get("REELRL_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_SERVER = "redis://127.0.0.1:6379"
#: db 0 holds the sessions' claims; 1..15 are handed out, one per running session
REDIS_DBS = range(1, 16)
CLAIM_KEY = "reelrl-test:db-claim:{}"
_session: dict[str, object] = {}
#: a suite still running after this many seconds fails each remaining test at once, naming the budget:
#: CI's 90 minutes (environment build included) would otherwise cut it off with no report at all. 70
#: minutes: a CI machine that runs the suite at half speed (seen: 264 tests in 40 minutes, where the same
#: commit's run on an idle machine passed all of them in 20) still finishes, and a run that is truly stuck
#: is reported with 15 minutes to spare for the environment build (~2 min fresh) and the twin subset.
#: Per-test timeouts and the watchdog below catch a single stuck test long before this.
SUITE_BUDGET_S = float(os.environ.get("REELRL_TEST_BUDGET_S", "4200"))
_STARTED = time.monotonic()
#: seconds past a test's own timeout (pytest-timeout) after which its session stops, printing every
#: thread's stack: the timeout's SIGALRM cannot interrupt a thread blocked in C code, and a test stuck
#: there would otherwise hold CI until its 90 minutes run out, with no word of which test or where
WATCHDOG_GRACE_S = float(os.environ.get("REELRL_TEST_WATCHDOG_GRACE_S", "120"))
_WATCHDOG_DEADLINE = pytest.StashKey[float]()


def timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout limit, as pytest-timeout itself reads it (mark, --timeout, ini)."""
    from pytest_timeout import _get_item_settings  # its own reading (pinned version)

    return float(_get_item_settings(item).timeout or 0)


def _arm_watchdog(item: pytest.Item) -> None:
    deadline = item.stash.get(_WATCHDOG_DEADLINE, None)
    if deadline is not None:
        remaining = max(1.0, deadline - time.monotonic())
        faulthandler.dump_traceback_later(remaining, exit=True, file=_session["stderr"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    limit = timeout_of(item)
    if limit > 0:
        item.stash[_WATCHDOG_DEADLINE] = time.monotonic() + limit + WATCHDOG_GRACE_S
        _arm_watchdog(item)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    # pytest's faulthandler plugin cancels the (one, process-wide) timer when a phase fails: re-armed
    # here, a teardown stuck after a timed-out test is still caught, by the test's own deadline
    _arm_watchdog(item)
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    missed = item.stash.get(_MISSED_TWIN, None)
    if missed:
        pytest.fail(missed, pytrace=False)
    spent = time.monotonic() - _STARTED
    if spent > SUITE_BUDGET_S:
        pytest.fail(
            f"the suite's time budget is spent ({spent:.0f} s > REELRL_TEST_BUDGET_S={SUITE_BUDGET_S:.0f}):"
            f" {item.nodeid} was not run. See the slowest tests in the --durations report.",
            pytrace=False,
        )


#: seconds each test file took in a recorded whole run, which orders the files under pytest-xdist;
#: ``REELRL_TEST_RECORD_DURATIONS=1 make test`` records them again (entries of files not run are kept)
DURATIONS_FILE = Path(__file__).with_name("durations.json")
#: the checkout under test
CHECKOUT = Path(__file__).resolve().parents[1]
_file_seconds: dict[str, float] = {}


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


#: set by scripts/test.sh in CI: the file of test ids that just passed in both twin sessions
TWIN_RAN = "REELRL_TEST_TWIN_RAN"
_MISSED_TWIN = pytest.StashKey[str]()


def leave_out_twins_that_ran(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests the twin sessions ran (exact ids: pytest's ``--deselect`` matches prefixes, so
    ``test_a`` would also take ``test_a_slow``), and mark any twin test they did not run to fail: a twin
    test must run twice at once, and one whose file the script did not find would not have."""
    path = os.environ.get(TWIN_RAN)
    if not path:
        return
    ran = set(Path(path).read_text().splitlines())  # one id a line (an id may hold spaces)
    kept, left_out = [], []
    for item in items:
        (left_out if item.nodeid in ran else kept).append(item)
        if item.nodeid not in ran and item.get_closest_marker("twin"):
            item.stash[_MISSED_TWIN] = (
                f"{item.nodeid} is marked twin but did not pass in both twin sessions that scripts/test.sh "
                f"ran twice at once ({path}): its file was not among those the script found, or it did "
                "not pass in both"
            )
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    leave_out_twins_that_ran(config, items)
    order_for_xdist(config, items)


def order_for_xdist(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, files holding slow tests go first, the longest first as last recorded (files
    never recorded after them), then the rest: the two sessions start on the long runs and the many
    short tests fill in at the end, instead of one session finishing a long file alone while the other
    idles (longest-first keeps that tail to about the shortest slow file)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared_ids([item.nodeid for item in items])
        if shared:
            raise pytest.UsageError(shared)
        return
    slow_files = {_test_file(item.nodeid) for item in items if item.get_closest_marker("slow")}
    recorded = _recorded()
    # stable: each file's order is kept
    items.sort(key=lambda item: file_rank(_test_file(item.nodeid), slow_files, recorded))


def shared_ids(ids: list[str]) -> str | None:
    """What is wrong when tests share an id: pytest-xdist keys tests by id, and of a set sharing one it
    ran some and said nothing (a schemathesis test's 4 operations once ran as 1)."""
    if len(set(ids)) == len(ids):
        return None
    twice = sorted({i for i in ids if ids.count(i) > 1})
    return f"tests share an id, so some would not run under pytest-xdist: {twice}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    # the controller's view of a worker's collection: an error raised inside a worker would reach the
    # report as an internal error without its message
    shared = shared_ids(ids)
    if shared:
        pytest.exit(shared, returncode=4)


def file_rank(name: str, slow_files: set[str], recorded: dict[str, float]) -> tuple[bool, float]:
    """Where a test file goes in an xdist run (ascending): slow files by recorded seconds, longest
    first (unrecorded ones after them, as collected), then every other file in collection order."""
    if name not in slow_files:
        return True, 0.0
    return False, -float(recorded.get(name, 0.0))


def _recorded() -> dict[str, float]:
    try:
        return json.loads(DURATIONS_FILE.read_text())
    except (OSError, ValueError):  # missing or damaged: the order falls back to collection order
        return {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # the session that sees every report: the xdist controller, or a session without workers
    if os.environ.get("REELRL_TEST_RECORD_DURATIONS") and not os.environ.get("PYTEST_XDIST_WORKER"):
        name = _test_file(report.nodeid)
        _file_seconds[name] = _file_seconds.get(name, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # only a whole run that passed: a part of a file (-k, -m, a stop at the first failure) would
    # replace its whole-run seconds with a part's
    option = session.config.option
    if not _file_seconds or exitstatus != 0 or option.keyword or option.markexpr:
        return
    recorded = {name: s for name, s in _recorded().items() if (DURATIONS_FILE.parents[1] / name).exists()}
    recorded.update({name: round(seconds, 1) for name, seconds in _file_seconds.items()})
    with tempfile.NamedTemporaryFile("w", dir=DURATIONS_FILE.parent, suffix=".partial", delete=False) as out:
        out.write(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
    os.replace(out.name, DURATIONS_FILE)  # whole or not at all, whoever else writes it


def pytest_configure(config: pytest.Config) -> None:
    # The watchdog writes from C when it fires, to a file descriptor: a copy of the session's real
    # stderr taken now (capture is suspended during configuration), not the capture file that stands
    # in for fd 2 while a test runs. pytest's own faulthandler plugin keeps its copy the same way.
    _session["stderr"] = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")
    # A short private temp folder (Ray's AF_UNIX socket paths must stay under 107 characters): files
    # that this session's processes leave behind land here, not among another session's.
    folder = tempfile.mkdtemp(prefix=f"rt{os.getpid()}-", dir="/tmp")
    _session["tmpdir"] = folder
    # torch's compiled-kernel cache would follow TMPDIR; it is safe to share, and a warm one saves
    # every engine start minutes of compiling
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}")
    )
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # re-read TMPDIR
    # wandb keeps its service logs, cache and settings in the user's home folders, shared by every
    # session on the machine: two suites' wandb tests wrote one log folder (and both hung there).
    # This session's wandb runs keep theirs here.
    for var, sub in (
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        os.environ[var] = str(Path(folder) / "wandb" / sub)
    # The processes tests start (CLI runs, Celery workers, Ray workers) import this checkout's code too.
    # The shared environment's editable install points at whichever clone last ran scripts/bootstrap.sh,
    # so a child started outside this folder would otherwise run another clone's code.
    paths = [str(CHECKOUT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def pytest_unconfigure(config: pytest.Config) -> None:
    stderr = _session.pop("stderr", None)
    if stderr is not None:
        stderr.close()
    db = _session.pop("redis_db", None)
    if db is not None:
        import redis

        client = redis.Redis.from_url(f"{REDIS_SERVER}/0")
        try:
            client.delete(CLAIM_KEY.format(db))
        finally:
            client.close()
    folder = _session.pop("tmpdir", None)
    if folder:
        shutil.rmtree(str(folder), ignore_errors=True)


def _claim_redis_db() -> int:
    """A Redis database for this session alone: the first of 1..15 whose claim is free or belongs to a
    process that no longer exists. The claim holds this process's PID and is deleted at the end."""
    import redis

    client = redis.Redis.from_url(f"{REDIS_SERVER}/0")
    try:
        me = str(os.getpid())
        for db in REDIS_DBS:
            key = CLAIM_KEY.format(db)
            if client.set(key, me, nx=True):
                return db
            holder = client.get(key)
            if holder is not None and not psutil.pid_exists(int(holder)):
                # a session that died without releasing: take over only if nobody else just did
                with client.pipeline() as pipe:
                    try:
                        pipe.watch(key)
                        if pipe.get(key) == holder:
                            pipe.multi()
                            pipe.set(key, me)
                            pipe.execute()
                            return db
                    except redis.WatchError:
                        continue
        pytest.fail(f"every Redis test database {REDIS_DBS.start}..{REDIS_DBS.stop - 1} is claimed")
    finally:
        client.close()


def _redis_base() -> str:
    if "REELRL_TEST_REDIS" in os.environ:
        return os.environ["REELRL_TEST_REDIS"]
    if "redis_db" not in _session:
        _session["redis_db"] = _claim_redis_db()
    return f"{REDIS_SERVER}/{_session['redis_db']}"


def own_processes() -> list[psutil.Process]:
    """This test process and every process it started, however deep (engines, Ray, workers)."""
    me = psutil.Process()
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


def own_shm_segments() -> set[Path]:
    """The /dev/shm files that this session's processes map now: what they created or share. Leak
    checks compare these, never the whole of /dev/shm, which other sessions' engines also use."""
    found: set[Path] = set()
    for process in own_processes():
        try:
            maps = Path(f"/proc/{process.pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                found.add(Path(parts[5].removesuffix(" (deleted)")))
    return found


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def reelrl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Embedded defaults (SQLite, local frame root, filesystem broker) under a fresh home."""
    home = tmp_path / "reelrl-home"
    for var in list(os.environ):
        if var.startswith("REELRL_") and not var.startswith("REELRL_TEST_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("REELRL_HOME", str(home))
    reset_settings_cache()
    yield home
    reset_settings_cache()


@pytest.fixture(scope="session")
def postgres_admin():
    if not _reachable("127.0.0.1", 5432):
        pytest.fail("Postgres is not reachable on 127.0.0.1:5432 (scripts/test.sh starts it)")
    from sqlalchemy import create_engine

    engine = create_engine(PG_BASE)
    yield engine
    engine.dispose()


@pytest.fixture
def postgres_url(postgres_admin) -> str:
    """A private, empty schema in the running Postgres for one test, dropped afterwards."""
    from sqlalchemy import text

    schema = f"reelrl_test_{uuid.uuid4().hex[:10]}"
    with postgres_admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield f"{PG_BASE}?options=-csearch_path%3D{schema}"
    from services.common.db.engine import dispose_engines

    dispose_engines()
    with postgres_admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


@pytest.fixture
def redis_url() -> str:
    """This session's Redis database, emptied before and after the test."""
    if not _reachable("127.0.0.1", 6379):
        pytest.fail("Redis is not reachable on 127.0.0.1:6379 (scripts/test.sh starts it)")
    import redis

    base = _redis_base()
    client = redis.Redis.from_url(base)
    client.flushdb()
    yield base
    client.flushdb()
    client.close()


@pytest.fixture
def services_env(
    reelrl_home: Path, postgres_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Production wiring: Postgres index, Redis broker, frame root under the test home."""
    monkeypatch.setenv("REELRL_DATABASE_URL", postgres_url)
    monkeypatch.setenv("REELRL_BROKER_URL", redis_url)
    reset_settings_cache()
    return reelrl_home


@pytest.fixture(scope="session")
def video_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small synthetic H.264 clips shared by the session (made once, read-only by convention)."""
    from services.common.frames.synthetic import make_video

    root = tmp_path_factory.mktemp("videos")
    make_video(root / "short.mp4", seconds=2.0, fps=30, width=320, height=240)
    make_video(root / "wide.mp4", seconds=3.0, fps=25, width=426, height=240)
    make_video(root / "tall.mp4", seconds=2.5, fps=24, width=240, height=352)
    return root


@pytest.fixture(scope="session")
def own_shm() -> object:
    """``own_shm()``: the /dev/shm files this session's processes map now (see own_shm_segments)."""
    return own_shm_segments
