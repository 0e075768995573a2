"""The job model on real databases: state machine, events, heartbeats, cancel, reaper, idempotency."""

import math
import threading
import time
from datetime import timedelta

import numpy as np
import pytest
import torch
from celery.exceptions import Ignore

from services.common.db.models import JobState, utcnow
from services.common.jobs import (
    JobConflict,
    JobNotFound,
    JobNotRunnable,
    JobSettings,
    create_job,
    create_or_get_job,
    get_job,
    job_events,
    jsonable,
    list_jobs,
    reap_stale_jobs,
    recent_events,
    request_cancel,
    run_job,
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
        assert reap_stale_jobs(now=later) == [job_id]
        job = get_job(job_id)
        assert job.state == JobState.failed and job.reason.startswith("worker lost: no heartbeat from")
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
