"""The job model on real databases: state machine, events, heartbeats, cancel, reaper, retries,
idempotency."""

import contextlib
import math
import sqlite3
import threading
import time
from datetime import timedelta

import numpy as np
import pytest
import torch
from celery.exceptions import Ignore

from services.common.db.models import JobState, utcnow
from services.common.jobs import (
    EventInfo,
    JobCancelled,
    JobConflict,
    JobNotFound,
    JobNotRunnable,
    JobSettings,
    claim_resend,
    create_job,
    create_or_get_job,
    fold_metrics,
    get_job,
    job_events,
    jsonable,
    list_jobs,
    mark_enqueued,
    metrics_steps,
    reap_stale_jobs,
    recent_events,
    request_cancel,
    run_job,
    unclaimed_jobs,
    unsent_retries,
)


@pytest.fixture(params=["sqlite", "postgres"])
def job_db(request, reelrl_home, monkeypatch):
    """The embedded SQLite database, or a private Postgres schema."""
    if request.param == "postgres":
        monkeypatch.setenv("REELRL_DATABASE_URL", request.getfixturevalue("postgres_url"))
    from services.common.settings import reset_settings_cache

    reset_settings_cache()
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "0.1")
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "5")
    return request.param


def _types(job_id):
    return [(e.type, e.data.get("state")) for e in job_events(job_id)]


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_create_list_and_read(job_db):
    a = create_job("preprocess", {"dataset": "a.jsonl"}, owner="ci")
    b = create_job("train", {"steps": 3})
    job = get_job(a)
    assert job.state == JobState.queued and job.owner == "ci" and job.config == {"dataset": "a.jsonl"}
    assert job.last_event == 1 and _types(a) == [("state", "queued")]
    items, total = list_jobs()
    assert total == 2 and [j.id for j in items] == [b, a]  # newest first
    items, total = list_jobs(kind="train")
    assert total == 1 and items[0].id == b
    items, total = list_jobs(state=JobState.running)
    assert (items, total) == ([], 0)
    items, total = list_jobs(limit=1, offset=1)
    assert total == 2 and [j.id for j in items] == [a]
    with pytest.raises(JobNotFound, match="nope"):
        get_job("nope")


def test_idempotency_key_creates_one_job(job_db):
    first, created = create_or_get_job("preprocess", {"x": 1}, idempotency_key="k1")
    again, created_again = create_or_get_job("preprocess", {"x": 1}, idempotency_key="k1")
    assert created and not created_again and first.id == again.id
    with pytest.raises(JobConflict, match="k1"):
        create_or_get_job("preprocess", {"x": 2}, idempotency_key="k1")
    with pytest.raises(JobConflict, match="k1"):
        create_or_get_job("train", {"x": 1}, idempotency_key="k1")

    ids = []
    threads = [
        threading.Thread(target=lambda: ids.append(create_job("eval", {"b": 1}, idempotency_key="race")))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 4 and len(set(ids)) == 1
    assert list_jobs(kind="eval")[1] == 1


def test_run_job_success_reports_progress_events_result(job_db, monkeypatch):
    monkeypatch.setenv("REELRL_JOB_PROGRESS_INTERVAL_S", "1000")
    # No heartbeat during the loop: it would also write the merged progress.
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "100")
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "300")
    job_id = create_job("train", {"steps": 10})
    with run_job(job_id) as ctx:
        assert ctx.job_id == job_id and ctx.config == {"steps": 10}
        assert get_job(job_id).state == JobState.running
        for step in range(1, 11):
            # The first report is written, the next eight are merged away, the final one is written.
            ctx.progress(step, 10, f"step {step}")
            ctx.event("metrics", {"step": step, "reward/all/accuracy": step / 10})
        ctx.set_result({"final_accuracy": 1.0})
    job = get_job(job_id)
    assert job.state == JobState.succeeded and job.reason is None and job.finished_at is not None
    assert job.progress.done == 10 and job.progress.total == 10 and job.progress.message == "step 10"
    assert job.result == {"final_accuracy": 1.0} and job.attempts == 1
    events = job_events(job_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free, in order
    progress = [e.data["done"] for e in events if e.type == "progress"]
    assert progress == [1, 10]
    metrics = [e.data for e in events if e.type == "metrics"]
    assert [m["step"] for m in metrics] == list(range(1, 11))
    assert events[0].data == {"state": "queued"} and events[1].data["state"] == "running"
    assert events[-1].type == "state" and events[-1].data["state"] == "succeeded"
    assert events[-1].data["result"] == {"final_accuracy": 1.0}
    assert [e.seq for e in job_events(job_id, after=3, types=["metrics"], limit=2)] == [4, 5]
    last = recent_events(job_id, 2, exclude_types=("metrics",))
    assert [(e.type, e.data.get("done"), e.data.get("state")) for e in last] == [
        ("progress", 10, None),
        ("state", None, "succeeded"),
    ]


def test_failure_records_the_reason_and_reraises(job_db):
    job_id = create_job("preprocess", {})
    with pytest.raises(ValueError, match="corrupt clip"), run_job(job_id):
        raise ValueError("corrupt clip videos/a.mp4")
    job = get_job(job_id)
    assert job.state == JobState.failed and job.reason == "ValueError: corrupt clip videos/a.mp4"
    last = job_events(job_id)[-1]
    assert last.data["state"] == "failed" and "corrupt clip" in last.data["traceback"]


def test_finished_job_is_not_run_again(job_db):
    job_id = create_job("preprocess", {})
    with run_job(job_id):
        pass
    ran = []
    with pytest.raises(JobNotRunnable, match="already finished") as info, run_job(job_id):
        ran.append(True)
    assert not ran and isinstance(info.value, Ignore)  # Celery acknowledges and drops the message
    assert get_job(job_id).state == JobState.succeeded and get_job(job_id).attempts == 1
    with pytest.raises(JobNotFound), run_job("missing"):
        pass


def test_running_job_with_live_heartbeat_is_not_run_twice(job_db):
    job_id = create_job("train", {})
    second: list[BaseException] = []

    def redelivered() -> None:
        try:
            with run_job(job_id, worker="other:1:1"):
                second.append(AssertionError("ran twice"))
        except JobNotRunnable as exc:
            second.append(exc)

    with run_job(job_id, worker="first:1:1"):
        thread = threading.Thread(target=redelivered)
        thread.start()
        thread.join()
    assert len(second) == 1 and isinstance(second[0], JobNotRunnable)
    assert "running on first:1:1" in str(second[0])
    job = get_job(job_id)
    assert job.state == JobState.succeeded and job.attempts == 1 and job.worker == "first:1:1"


def test_cancel_queued_running_and_finished(job_db):
    queued = create_job("eval", {})
    assert request_cancel(queued).state == JobState.cancelled
    with pytest.raises(JobNotRunnable), run_job(queued):
        pass
    with pytest.raises(JobConflict, match="already cancelled"):
        request_cancel(queued)

    running = create_job("train", {})
    with run_job(running) as ctx:
        assert request_cancel(running).cancel_requested
        # The worker learns of it from its next heartbeat (0.1 s here).
        assert wait_for(ctx.cancel_requested)
    job = get_job(running)
    assert job.state == JobState.cancelled and job.reason == "cancelled on request"
    assert ("cancel_requested", None) in _types(running)
    with pytest.raises(JobConflict, match="already cancelled"):
        request_cancel(running)

    raised = create_job("train", {})
    with run_job(raised) as ctx:
        request_cancel(raised)
        assert wait_for(ctx.cancel_requested)
        ctx.raise_if_cancelled()
        raise AssertionError("raise_if_cancelled did not raise")
    assert get_job(raised).state == JobState.cancelled

    done = create_job("preprocess", {})
    with run_job(done):
        pass
    with pytest.raises(JobConflict, match="already succeeded"):
        request_cancel(done)
    with pytest.raises(JobNotFound):
        request_cancel("missing")


def test_heartbeat_advances_while_the_body_runs(job_db):
    job_id = create_job("train", {})
    with run_job(job_id):
        first = get_job(job_id).heartbeat_at
        assert wait_for(lambda: get_job(job_id).heartbeat_at > first)


def test_reaper_fails_a_silent_job_and_its_worker_stops(job_db):
    job_id = create_job("train", {})
    with run_job(job_id) as ctx:
        assert reap_stale_jobs() == []  # heartbeat is fresh
        later = utcnow() + timedelta(seconds=60)
        assert [(r.job_id, r.state) for r in reap_stale_jobs(now=later)] == [(job_id, JobState.failed)]
        job = get_job(job_id)
        assert job.state == JobState.failed and job.reason.startswith("worker lost: no heartbeat from")
        assert "retries" not in job.reason  # none were allowed: nothing to say about them
        # The worker's next heartbeat finds the job gone: it is told to stop, and writes nothing more.
        assert wait_for(lambda: ctx.lost) and ctx.cancel_requested()
        assert ctx.event("metrics", {"step": 1}) is None
    assert get_job(job_id).state == JobState.failed
    assert [t for t in _types(job_id) if t[0] == "state"][-1] == ("state", "failed")


def test_redelivery_after_worker_death_fails_the_job(job_db, monkeypatch):
    """A message redelivered after its worker died finds a silent heartbeat: the job fails, nothing reruns."""
    job_id = create_job("train", {})
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "100")  # the first worker never beats again
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "300")
    with run_job(job_id, worker="dead:1:1"):
        monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "0.05")
        monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "0.3")
        time.sleep(0.5)
        with pytest.raises(JobNotRunnable, match="worker lost"), run_job(job_id, worker="new:1:1"):
            raise AssertionError("ran twice")
    # The first worker ending late cannot overwrite the verdict.
    job = get_job(job_id)
    assert job.state == JobState.failed and "dead:1:1" in job.reason and job.attempts == 1


def _later(seconds: float = 60):
    return utcnow() + timedelta(seconds=seconds)


def test_reaper_requeues_a_lost_job_until_its_retries_are_spent(job_db):
    job_id = create_job("preprocess", {}, max_retries=1)
    assert get_job(job_id).max_retries == 1
    with run_job(job_id, worker="first:1:1") as first:
        reaped = reap_stale_jobs(now=_later())
        assert [(r.job_id, r.kind, r.state) for r in reaped] == [(job_id, "preprocess", JobState.queued)]
        job = get_job(job_id)
        assert job.state == JobState.queued and job.attempts == 1 and job.enqueued_at is None
        assert job.reason.startswith("worker lost: no heartbeat from first:1:1")
        assert job.reason.endswith("; retry 1 of 1")
        requeued = job_events(job_id)[-1]
        assert requeued.type == "state" and requeued.data["state"] == "queued"
        assert (requeued.data["retry"], requeued.data["max_retries"]) == (1, 1)
        # Until the API sends its task again the job is listed as unsent, then no more.
        assert unsent_retries() == [(job_id, "preprocess")]
        mark_enqueued(job_id)
        assert unsent_retries() == []
        # The first attempt's worker is fenced off: its next heartbeat stops it, it writes nothing.
        assert wait_for(lambda: first.lost) and first.cancel_requested()
        assert first.event("metrics", {"step": 1}) is None

        with run_job(job_id, worker="second:1:1") as second:
            assert second.attempt == 2
            job = get_job(job_id)
            assert job.state == JobState.running and job.attempts == 2 and job.reason is None
            assert job_events(job_id)[-1].data == {"state": "running", "worker": "second:1:1", "attempt": 2}
            # The second attempt dies too: no retry is left.
            reaped = reap_stale_jobs(now=_later())
            assert [(r.job_id, r.state) for r in reaped] == [(job_id, JobState.failed)]
            assert wait_for(lambda: second.lost)
    # Neither late worker ending overwrote the verdict.
    job = get_job(job_id)
    assert job.state == JobState.failed and job.attempts == 2
    assert job.reason.startswith("worker lost: no heartbeat from second:1:1")
    assert job.reason.endswith("; no retries left (2 attempts)")
    states = [e.data["state"] for e in job_events(job_id) if e.type == "state"]
    assert states == ["queued", "running", "queued", "running", "failed"]


def test_a_lost_job_whose_cancel_was_requested_ends_cancelled(job_db):
    job_id = create_job("train", {}, max_retries=3)
    with run_job(job_id) as ctx:
        request_cancel(job_id)
        assert wait_for(ctx.cancel_requested)
        assert [r.state for r in reap_stale_jobs(now=_later())] == [JobState.cancelled]
    job = get_job(job_id)
    assert job.state == JobState.cancelled and job.reason.startswith("cancelled on request (worker lost")
    assert unsent_retries() == []


def _before_append(monkeypatch, when, action):
    """Run ``action`` once, just before the first job update for which ``when(event_type, data)`` holds
    (the moment another process could act between a read and the guarded write)."""
    from services.common import jobs

    original, pending = jobs._append, [True]

    def append(session, job_id, conditions, event_type, data, **values):
        if pending[0] and when(event_type, data):
            pending[0] = False
            action(job_id)
        return original(session, job_id, conditions, event_type, data, **values)

    monkeypatch.setattr(jobs, "_append", append)


def test_a_cancel_requested_while_the_reaper_decides_is_not_retried(job_db, monkeypatch):
    job_id = create_job("train", {}, max_retries=3)
    with run_job(job_id, worker="dead:1:1"):
        # The reaper read the job (no cancel yet) and is about to re-queue it when the cancel lands.
        _before_append(monkeypatch, lambda type, data: data.get("state") == "queued", request_cancel)
        assert [r.state for r in reap_stale_jobs(now=_later())] == [JobState.cancelled]
    job = get_job(job_id)
    assert job.state == JobState.cancelled and job.reason.startswith("cancelled on request (worker lost")
    assert unsent_retries() == []


def _requeue_with_cancel_requested(job_id):
    """The state an older reaper could leave: re-queued for a retry after a cancel was acknowledged."""
    from sqlalchemy import update

    from services.common.db import session_scope
    from services.common.db.models import Job

    with session_scope() as session:
        session.execute(
            update(Job).where(Job.id == job_id).values(state=JobState.queued, cancel_requested=True)
        )


def test_a_queued_job_whose_cancel_was_requested_is_cancelled_not_run(job_db):
    job_id = create_job("train", {}, max_retries=1)
    with run_job(job_id, worker="dead:1:1"):
        request_cancel(job_id)
        _requeue_with_cancel_requested(job_id)
        with pytest.raises(JobNotRunnable, match="cancelled while queued"), run_job(job_id, worker="new:1:1"):
            raise AssertionError("a cancelled job ran")
    job = get_job(job_id)
    assert job.state == JobState.cancelled and job.attempts == 1
    assert job.reason == "cancelled while queued for a retry"


def test_a_cancel_that_races_the_reaper_is_not_lost(job_db, monkeypatch):
    job_id = create_job("train", {}, max_retries=1)
    with run_job(job_id, worker="dead:1:1"):
        # request_cancel found it running, not queued; the reaper re-queues it before the running-only
        # update: the cancel must still take effect, not answer 200 having done nothing.
        _before_append(
            monkeypatch,
            lambda type, data: type == "cancel_requested",
            lambda _: reap_stale_jobs(now=_later()),
        )
        job = request_cancel(job_id)
    assert job.state == JobState.cancelled and job.reason == "cancelled while queued for a retry"
    assert get_job(job_id).state == JobState.cancelled and unsent_retries() == []


def test_cancelling_a_requeued_job_says_so(job_db):
    job_id = create_job("eval", {}, max_retries=1)
    with run_job(job_id):
        reap_stale_jobs(now=_later())
        job = request_cancel(job_id)
    assert job.state == JobState.cancelled and job.reason == "cancelled while queued for a retry"
    assert get_job(job_id).state == JobState.cancelled and unsent_retries() == []


def test_redelivery_after_worker_death_runs_the_retry_once(job_db, monkeypatch):
    """The broker redelivers a dead worker's message: with a retry left, that message runs attempt 2;
    the task the API sends for the retry later finds it running and is dropped."""
    job_id = create_job("train", {}, max_retries=1)
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "100")  # the first worker never beats again
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "300")
    with run_job(job_id, worker="dead:1:1"):
        monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "0.1")
        monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "1")
        time.sleep(1.2)
        with run_job(job_id, worker="new:1:1") as ctx:
            assert ctx.attempt == 2 and get_job(job_id).worker == "new:1:1"
            with pytest.raises(JobNotRunnable, match="running on new:1:1"), run_job(job_id, worker="api:1:1"):
                raise AssertionError("ran twice")
            ctx.event("metrics", {"step": 1})
    # The first worker ending late (it wakes up after the retry finished) changes nothing.
    job = get_job(job_id)
    assert job.state == JobState.succeeded and job.attempts == 2 and job.worker == "new:1:1"


def _hold_job_row(job_id: str):
    """Another connection holding the lock a heartbeat needs (the job's row; all of SQLite)."""
    from sqlalchemy import select

    from services.common.db import get_engine
    from services.common.db.models import Job

    engine = get_engine()
    if engine.dialect.name == "sqlite":
        conn = sqlite3.connect(engine.url.database, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        return lambda: (conn.execute("ROLLBACK"), conn.close())
    conn = engine.connect()
    tx = conn.begin()
    conn.execute(select(Job.id).where(Job.id == job_id).with_for_update())
    return lambda: (tx.rollback(), conn.close())


def test_a_worker_that_cannot_heartbeat_stops_before_the_reaper_gives_its_job_away(job_db, monkeypatch):
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "0.2")
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "1.5")
    job_id = create_job("train", {}, max_retries=1)
    with run_job(job_id) as ctx:
        time.sleep(0.5)
        assert not ctx.cancel_requested()  # beating normally
        release = _hold_job_row(job_id)
        try:
            held = time.monotonic()
            # Within timeout - period (1.3 s) of its last beat, before any reaper may act.
            assert wait_for(ctx.cancel_requested, timeout=5)
            assert ctx.lost and time.monotonic() - held < 1.5
            with pytest.raises(JobCancelled):
                ctx.raise_if_cancelled()
        finally:
            release()
    # It stopped without claiming an end: the reaper decides (here: a retry).
    assert get_job(job_id).state == JobState.running
    assert [r.state for r in reap_stale_jobs(now=_later())] == [JobState.queued]


def _lose_the_fence(ctx, job_id):
    """Hold the job's row until the worker's fence runs out and it stops by itself."""
    release = _hold_job_row(job_id)
    try:
        assert wait_for(lambda: ctx.cancel_requested() and ctx.lost, timeout=5)
    finally:
        release()


@pytest.mark.parametrize("ending", ["raise_if_cancelled", "error", "returns"])
def test_a_worker_that_lost_its_fence_records_no_end(job_db, monkeypatch, ending):
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "0.2")
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "1.5")
    job_id = create_job("preprocess", {}, max_retries=1)
    with contextlib.suppress(RuntimeError), run_job(job_id) as ctx:
        _lose_the_fence(ctx, job_id)
        ctx.set_result({"rows": 3})
        if ending == "raise_if_cancelled":
            ctx.raise_if_cancelled()
        elif ending == "error":
            raise RuntimeError("stopped half-way")
    # Not "cancelled on request" nor failed: the job is still running, for the reaper to retry.
    job = get_job(job_id)
    assert job.state == JobState.running and job.result is None and job.reason is None
    assert [r.state for r in reap_stale_jobs(now=_later())] == [JobState.queued]


def _event(seq, type, data):
    return EventInfo(job_id="j", seq=seq, type=type, data=data, created_at=utcnow())


def test_fold_metrics_keeps_each_step_once_as_of_the_latest_history():
    events = [_event(i, "metrics", {"step": i, "loss": 1.0}) for i in range(1, 8)]
    events.append(_event(8, "metrics_rewind", {"after_step": 5}))
    events += [
        _event(9, "metrics", {"step": 6, "loss": 0.5}),
        _event(10, "metrics", {"step": 7, "loss": 0.4}),
    ]
    events.append(_event(11, "metrics", {"step": 8, "loss": 0.3}))
    steps, rewound = fold_metrics(events)
    assert [(s["step"], s["loss"]) for s in steps] == [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (5, 1.0),
                                                        (6, 0.5), (7, 0.4), (8, 0.3)]  # fmt: skip
    assert rewound == 5
    # A retry that died again before reaching step 7 leaves no step of the replaced history behind.
    steps, _ = fold_metrics(events[:9])
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6] and steps[-1]["loss"] == 0.5
    # Events from before rewinds existed: a repeated step replaces the earlier one.
    steps, rewound = fold_metrics(
        [_event(1, "metrics", {"step": 1, "x": 1}), _event(2, "metrics", {"step": 1, "x": 2})]
    )
    assert steps == [{"step": 1, "x": 2}] and rewound is None


def test_metrics_steps_reads_folded_steps_from_the_database(job_db):
    job_id = create_job("train", {}, max_retries=1)
    with run_job(job_id) as ctx:
        for step in range(4):
            ctx.event("metrics", {"step": step, "reward/overall": 0.1})
        ctx.event("metrics_rewind", {"after_step": 1})
        first_rewound_seq = ctx.event("metrics", {"step": 2, "reward/overall": 0.2})
    steps, last, rewound = metrics_steps(job_id)
    assert [(s["step"], s["reward/overall"]) for s in steps] == [(0, 0.1), (1, 0.1), (2, 0.2)]
    assert last == first_rewound_seq and rewound == 1
    assert metrics_steps(job_id, after=last) == ([], last, None)


def test_max_retries_is_bounded(job_db):
    with pytest.raises(ValueError, match="max_retries"):
        create_job("train", {}, max_retries=-1)
    # The retry budget is how to run a job, not which job: a replayed key keeps the first one's.
    first, _ = create_or_get_job("eval", {"b": 1}, idempotency_key="r", max_retries=2)
    again, created = create_or_get_job("eval", {"b": 1}, idempotency_key="r", max_retries=0)
    assert not created and again.id == first.id and again.max_retries == 2


def test_event_types_and_payloads_are_checked(job_db):
    job_id = create_job("train", {})
    with run_job(job_id) as ctx:
        for reserved in ("state", "progress", "cancel_requested", "Bad Type"):
            with pytest.raises(ValueError, match="event type"):
                ctx.event(reserved, {})
        with pytest.raises(TypeError, match=r"metrics event\.bad: object"):
            ctx.event("metrics", {"step": 1, "bad": object()})
        with pytest.raises(ValueError, match="non-negative"):
            ctx.progress(-1)
        seq = ctx.event("metrics", {"step": 1, "kl": float("nan"), "loss": np.float32(0.5)})
    stored = next(e for e in job_events(job_id) if e.seq == seq).data
    assert stored == {"step": 1, "kl": None, "loss": 0.5}


def test_jsonable_values():
    assert jsonable({"a": [1, 2.5, math.inf], "b": (True, None)}) == {"a": [1, 2.5, None], "b": [True, None]}
    assert jsonable({"t": torch.tensor(3), "n": np.int64(7)}) == {"t": 3, "n": 7}
    with pytest.raises(TypeError, match=r"data\.x\[1\]: set"):
        jsonable({"x": [1, {2}]})
    with pytest.raises(TypeError, match="key 1"):
        jsonable({1: 2})


def test_heartbeat_timeout_must_leave_room_for_late_beats(monkeypatch):
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "10")
    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_TIMEOUT_S", "20")
    with pytest.raises(ValueError, match="at least 3 x"):
        JobSettings()


def test_orm_matches_the_migration(job_db):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from services.common.db import ensure_schema
    from services.common.db.models import Base

    engine = ensure_schema()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    ours = [d for d in diff if any(t in str(d) for t in ("'jobs'", "job_events", "api_tokens"))]
    assert ours == []


def test_unclaimed_jobs_are_those_queued_past_the_bound_and_one_caller_takes_each(job_db):
    settings = JobSettings(lost_message_s=60)
    sent, never_sent, claimed = create_job("train", {}), create_job("eval", {}), create_job("train", {})
    mark_enqueued(sent)
    mark_enqueued(claimed)
    with run_job(claimed, worker="w"):
        assert unclaimed_jobs(settings) == []  # none is older than the bound yet
        later = utcnow() + timedelta(seconds=61)
        found = unclaimed_jobs(settings, now=later)
    # Running and finished jobs are never candidates; a job never sent is one (the API died before
    # sending it), as is a sent one nobody claimed.
    assert sorted(j.id for j in found) == sorted([sent, never_sent])
    first = {j.id: j for j in found}
    assert claim_resend(first[sent]) and not claim_resend(first[sent])  # a second reconciler loses
    assert claim_resend(first[never_sent]) and not claim_resend(first[never_sent])
    # Sent again just now: not a candidate until the bound has passed again.
    assert unclaimed_jobs(settings, now=utcnow() + timedelta(seconds=30)) == []
    assert {j.id for j in unclaimed_jobs(settings, now=utcnow() + timedelta(seconds=61))} == {
        sent,
        never_sent,
    }
    request_cancel(sent)
    assert [j.id for j in unclaimed_jobs(settings, now=utcnow() + timedelta(seconds=61))] == [never_sent]
    assert not claim_resend(first[sent])  # cancelled meanwhile
