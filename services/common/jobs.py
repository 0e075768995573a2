"""The job model every worker shares: create, claim, heartbeat, report, finish, reap (SPEC §7).

A job is a row in ``jobs`` and an append-only list of events in ``job_events``. States move
queued → running → succeeded | failed | cancelled, and running → queued when the job's worker died and
the job has retries left (``max_retries``); nowhere else. Every change writes an event in the
same transaction as the row, numbered per job by the UPDATE that locks the row, so event numbers are
gap-free and in commit order: an SSE client resuming from ``Last-Event-ID`` misses nothing, across API
restarts too.

A Celery task of any kind runs its job like this::

    @app.task(name="reelrl.train.run")
    def run(job_id: str) -> None:
        with run_job(job_id) as ctx:
            for step in range(steps):
                if ctx.cancel_requested():
                    break  # keep the last checkpoint; the job ends "cancelled"
                ctx.event("metrics", {"step": step, "reward/all/accuracy": acc})
                ctx.progress(step + 1, steps)

``run_job`` refuses (raising :class:`JobNotRunnable`, which Celery treats as "ignore and acknowledge")
a redelivered message for a job that is finished or still running under a live heartbeat, so a job
never runs twice at once. A worker that dies stops heartbeating; :func:`reap_stale_jobs` (run
periodically by the API) then puts the job back in the queue while it has retries left (the API sends
its task again) and fails it with the reason once they are spent. Every write of a worker is fenced by
the job's attempt number, and a worker that could not renew its heartbeat for nearly the timeout stops
by itself, so the worker of an earlier attempt can neither write nor keep running beside the next one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import Ignore
from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from services.common.db import session_scope
from services.common.db.models import Job, JobEvent, JobState, utcnow
from services.common.job_headline import headline

log = logging.getLogger(__name__)

# Written by this module only; workers report with other types ("metrics", "result", ...).
STATE_EVENT = "state"
PROGRESS_EVENT = "progress"
CANCEL_EVENT = "cancel_requested"
RESERVED_EVENTS = frozenset({STATE_EVENT, PROGRESS_EVENT, CANCEL_EVENT})
# One training step's values ({"step": n, key: value, …}).
METRICS_EVENT = "metrics"
# {"after_step": n}: the metrics events before it for steps after n are superseded by the ones that
# follow it (a retried training job resumed from step n's checkpoint and recomputes the later steps).
METRICS_REWIND_EVENT = "metrics_rewind"
_EVENT_TYPE = re.compile(r"[a-z][a-z0-9_.-]{0,31}")
_REASON_CHARS = 4000
_TRACEBACK_CHARS = 16000
MAX_RETRIES_LIMIT = 20


class JobSettings(BaseSettings):
    """Heartbeat timing and size bounds, from ``REELRL_JOB_*`` environment variables (read when a job
    starts, or is submitted)."""

    model_config = SettingsConfigDict(env_prefix="REELRL_JOB_", extra="ignore")

    heartbeat_s: float = Field(5.0, gt=0, description="seconds between a running job's heartbeats")
    heartbeat_timeout_s: float = Field(60.0, gt=0, description="silence after which a job is failed")
    # Progress reports closer together than this are merged (the latest wins).
    progress_interval_s: float = Field(0.5, ge=0)
    # Size bounds of a submitted job (services.common.job_bounds), checked at submission.
    max_files: int = Field(256, gt=0, description="files one list of a job's config may name")
    max_samples: int = Field(1_000_000, gt=0, description="samples all of a job's dataset files may hold")
    # A queued job nobody claimed for this long is looked for on the broker, and sent again if its
    # message is gone (a broker that restarted without its data); never sooner, so a job whose message
    # was just taken by a worker that has not claimed it yet is not sent twice.
    lost_message_s: float = Field(
        60.0, gt=0, description="unclaimed seconds before a job's message is checked"
    )

    @model_validator(mode="after")
    def _check(self) -> JobSettings:
        if self.heartbeat_timeout_s < 3 * self.heartbeat_s:
            raise ValueError(
                f"REELRL_JOB_HEARTBEAT_TIMEOUT_S ({self.heartbeat_timeout_s:g}) must be at least 3 x "
                f"REELRL_JOB_HEARTBEAT_S ({self.heartbeat_s:g}); otherwise one late beat fails a live job"
            )
        return self


class JobNotFound(LookupError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id!r}")
        self.job_id = job_id


class JobConflict(ValueError):
    """The request contradicts the job's state or an earlier request (HTTP 409)."""


class JobNotRunnable(Ignore):
    """``run_job`` found the job finished or running elsewhere. Celery acknowledges and drops the message."""

    def __init__(self, job_id: str, state: JobState, reason: str) -> None:
        super().__init__(f"job {job_id} is not runnable ({state.value}): {reason}")
        self.job_id, self.state, self.reason = job_id, state, reason


class JobCancelled(Exception):
    """Raised by :meth:`JobContext.raise_if_cancelled`; ``run_job`` ends the job "cancelled"."""


class Progress(BaseModel):
    done: int = 0
    total: int | None = None
    message: str = ""


class JobInfo(BaseModel):
    """A job as clients see it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    state: JobState
    config: dict[str, Any]
    owner: str | None
    idempotency_key: str | None
    reason: str | None = Field(description="why the job failed or was cancelled")
    result: dict[str, Any] | None
    progress: Progress
    cancel_requested: bool
    worker: str | None
    attempts: int = Field(description="times a worker started the job (1 + retries so far)")
    max_retries: int = Field(description="re-queues allowed when the job's worker dies")
    last_event: int = Field(description="number of the job's latest event")
    created_at: datetime
    updated_at: datetime
    enqueued_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None

    @computed_field(description="how the job came out, in one line (e.g. each benchmark's overall score)")
    @property
    def headline(self) -> str | None:
        return headline(self.kind, self.result)


class EventInfo(BaseModel):
    job_id: str
    seq: int = Field(description="per-job event number, 1, 2, 3, …; the SSE event id")
    type: str
    data: dict[str, Any]
    created_at: datetime


def _info(job: Job) -> JobInfo:
    return JobInfo(
        id=job.id, kind=job.kind, state=job.state, config=job.config, owner=job.owner,
        idempotency_key=job.idempotency_key, reason=job.reason, result=job.result,
        progress=Progress(done=job.progress_done, total=job.progress_total, message=job.progress_message),
        cancel_requested=job.cancel_requested, worker=job.worker, attempts=job.attempts,
        max_retries=job.max_retries, last_event=job.last_seq, created_at=job.created_at, updated_at=job.updated_at,
        enqueued_at=job.enqueued_at, started_at=job.started_at, heartbeat_at=job.heartbeat_at,
        finished_at=job.finished_at,
    )  # fmt: skip


def jsonable(value: Any, path: str = "data") -> Any:
    """``value`` as plain JSON types. Non-finite floats become ``null`` (a gap in a chart); NumPy and
    torch scalars become numbers; anything else that JSON cannot hold raises, naming where it is."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is not a string")
            out[key] = jsonable(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return jsonable(value.item(), path)
    raise TypeError(f"{path}: {type(value).__name__} is not JSON-serialisable")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _append(
    session: Session,
    job_id: str,
    conditions: tuple[ColumnElement[bool], ...],
    event_type: str,
    data: dict[str, Any],
    **values: Any,
) -> int | None:
    """Update the job (if ``conditions`` hold) and append one event; the new event number, or None."""
    now = utcnow()
    seq = session.execute(
        update(Job)
        .where(Job.id == job_id, *conditions)
        .values(last_seq=Job.last_seq + 1, updated_at=now, **values)
        .returning(Job.last_seq)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if seq is not None:
        session.add(JobEvent(job_id=job_id, seq=seq, type=event_type, data=data, created_at=now))
    return seq


# --- API side: create, read, cancel ------------------------------------------------------------


def create_or_get_job(
    kind: str,
    config: dict[str, Any],
    idempotency_key: str | None = None,
    owner: str | None = None,
    max_retries: int = 0,
    exclusive: str | None = None,
) -> tuple[JobInfo, bool]:
    """A new queued job, or the job created earlier with the same idempotency key (``created`` False).

    Reusing a key for a different kind or config raises :class:`JobConflict`; the earlier job keeps
    its own ``max_retries`` (the retry budget is how to run a job, not which job it is). With
    ``exclusive`` (a dotted config key), a live job of the kind with the same value there also
    raises :class:`JobConflict`: two training jobs writing one output folder would mix their runs.
    """
    if not 0 <= max_retries <= MAX_RETRIES_LIMIT:
        raise ValueError(f"max_retries must be within 0..{MAX_RETRIES_LIMIT}, got {max_retries}")
    config = jsonable(config, "config")
    scope = None if idempotency_key is None else _digest(owner or "", idempotency_key)
    if scope is not None:
        existing = _by_key(scope, idempotency_key, kind, config)
        if existing is not None:
            return existing, False
    value = None if exclusive is None else _at(config, exclusive)
    held = None if value is None else _digest(kind, json.dumps(value, sort_keys=True))
    if held is not None:
        _refuse_if_held(kind, exclusive, value, held)  # the usual case, with the holder named
        _refuse_if_foreign(kind, exclusive, value, held, owner)
    job_id = uuid.uuid4().hex
    now = utcnow()
    try:
        with session_scope() as session:
            session.add(
                Job(
                    id=job_id, kind=kind, state=JobState.queued, config=config,
                    idempotency_key=idempotency_key, idempotency_scope=scope, exclusive_key=held, owner=owner,
                    progress_done=0, progress_message="", cancel_requested=False, attempts=0,
                    max_retries=max_retries, last_seq=1, created_at=now, updated_at=now,
                )
            )  # fmt: skip
            session.flush()
            session.add(
                JobEvent(job_id=job_id, seq=1, type=STATE_EVENT, data={"state": "queued"}, created_at=now)
            )
    except IntegrityError:
        # A concurrent submit won the insert: the same key (its job is the answer), or another live job
        # of the same exclusive value (uq_jobs_live_exclusive: the read above cannot see it coming).
        existing = None if scope is None else _by_key(scope, idempotency_key, kind, config)
        if existing is not None:
            return existing, False
        if held is not None:
            _refuse_if_held(kind, exclusive, value, held)
        raise
    return get_job(job_id), True


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _refuse_if_held(kind: str, exclusive: str | None, value: Any, held: str) -> None:
    """:class:`JobConflict` naming the live job of ``kind`` that holds ``exclusive=value``, if any."""
    with session_scope() as session:
        holder = session.scalar(
            select(Job).where(Job.exclusive_key == held, Job.state.in_([JobState.queued, JobState.running]))
        )
        if holder is not None:
            raise JobConflict(
                f"{exclusive}={value} is in use by {holder.state.value} {kind} job {holder.id}; wait for it "
                f"to end, cancel it, or choose another {exclusive}"
            )


def _refuse_if_foreign(kind: str, exclusive: str | None, value: Any, held: str, owner: str | None) -> None:
    """:class:`JobConflict` if earlier jobs of ``kind`` used ``exclusive=value`` and none was this
    owner's: a training folder's runs belong to whoever's jobs made them (resuming one there discards
    its later checkpoints and truncates its metrics)."""
    with session_scope() as session:
        owners = set(session.scalars(select(Job.owner).where(Job.exclusive_key == held).distinct()))
    if owners and owner not in owners:
        raise JobConflict(
            f"{exclusive}={value} holds the runs of another owner's {kind} jobs; choose another {exclusive}"
        )


def create_job(
    kind: str,
    config: dict[str, Any],
    idempotency_key: str | None = None,
    owner: str | None = None,
    max_retries: int = 0,
) -> str:
    """The id of a new queued job (or of the earlier job with this idempotency key)."""
    return create_or_get_job(kind, config, idempotency_key, owner, max_retries)[0].id


def _at(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _by_key(scope: str, key: str, kind: str, config: dict[str, Any]) -> JobInfo | None:
    """The job this owner submitted with ``key`` (``scope``: the digest of both), if any."""
    with session_scope() as session:
        job = session.scalar(select(Job).where(Job.idempotency_scope == scope))
        if job is None:
            return None
        if job.kind != kind or _canonical(job.config) != _canonical(config):
            raise JobConflict(
                f"idempotency key {key!r} already names job {job.id} ({job.kind}) with a different "
                "kind or config; use a new key for a new job"
            )
        return _info(job)


def get_job(job_id: str) -> JobInfo:
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise JobNotFound(job_id)
        return _info(job)


def list_jobs(
    kind: str | None = None, state: JobState | None = None, limit: int = 50, offset: int = 0
) -> tuple[list[JobInfo], int]:
    """Newest first, and the total count under the same filters."""
    filters = []
    if kind is not None:
        filters.append(Job.kind == kind)
    if state is not None:
        filters.append(Job.state == state)
    with session_scope() as session:
        total = session.scalar(select(func.count()).select_from(Job).where(*filters)) or 0
        rows = session.scalars(
            select(Job).where(*filters).order_by(Job.created_at.desc(), Job.id).limit(limit).offset(offset)
        ).all()
        return [_info(job) for job in rows], total


def changed_jobs(since: datetime) -> list[JobInfo]:
    """Jobs whose row changed at or after ``since`` (oldest change first)."""
    with session_scope() as session:
        rows = session.scalars(select(Job).where(Job.updated_at >= since).order_by(Job.updated_at)).all()
        return [_info(job) for job in rows]


def job_events(
    job_id: str, after: int = 0, types: list[str] | None = None, limit: int | None = None
) -> list[EventInfo]:
    """Events of a job numbered above ``after``, in order."""
    query = select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq > after)
    if types:
        query = query.where(JobEvent.type.in_(types))
    query = query.order_by(JobEvent.seq)
    if limit is not None:
        query = query.limit(limit)
    with session_scope() as session:
        return [
            EventInfo(job_id=e.job_id, seq=e.seq, type=e.type, data=e.data, created_at=e.created_at)
            for e in session.scalars(query)
        ]


def fold_metrics(events: list[EventInfo]) -> tuple[list[dict[str, Any]], int | None]:
    """Each step once, as of the last event, from ``metrics`` and ``metrics_rewind`` events in order;
    and the lowest ``after_step`` of the rewinds among them (None if none): a client holding steps
    from before these events drops those above it."""
    steps: dict[int | str, dict[str, Any]] = {}  # in order of arrival, which is step order
    rewound: int | None = None
    for event in events:
        if event.type == METRICS_REWIND_EVENT:
            after = int(event.data["after_step"])
            steps = {n: d for n, d in steps.items() if not isinstance(n, int) or n <= after}
            rewound = after if rewound is None else min(rewound, after)
        elif event.type == METRICS_EVENT:
            step = event.data.get("step")
            # A step reported again without a rewind (events from before rewinds existed) also
            # replaces the earlier one; one without a number (not from the trainer) is kept as is.
            key = step if isinstance(step, int) and not isinstance(step, bool) else f"#{event.seq}"
            steps.pop(key, None)
            steps[key] = event.data
    return list(steps.values()), rewound


def metrics_steps(job_id: str, after: int = 0) -> tuple[list[dict[str, Any]], int, int | None]:
    """:func:`fold_metrics` of the job's events numbered above ``after``, with the last number read."""
    events = job_events(job_id, after=after, types=[METRICS_EVENT, METRICS_REWIND_EVENT])
    steps, rewound = fold_metrics(events)
    return steps, (events[-1].seq if events else after), rewound


def recent_events(job_id: str, limit: int, exclude_types: tuple[str, ...] = ()) -> list[EventInfo]:
    """The job's last ``limit`` events (oldest first), leaving out the given types."""
    query = select(JobEvent).where(JobEvent.job_id == job_id)
    if exclude_types:
        query = query.where(JobEvent.type.not_in(exclude_types))
    with session_scope() as session:
        rows = session.scalars(query.order_by(JobEvent.seq.desc()).limit(limit)).all()
        return [
            EventInfo(job_id=e.job_id, seq=e.seq, type=e.type, data=e.data, created_at=e.created_at)
            for e in reversed(rows)
        ]


def request_cancel(job_id: str) -> JobInfo:
    """Cancel a queued job at once; ask a running one to stop (its worker sees it within a heartbeat).

    A finished job raises :class:`JobConflict`.
    """
    done = None
    for _ in range(5):
        with session_scope() as session:
            for attempted, reason in (
                (Job.attempts == 0, "cancelled before it started"),
                (Job.attempts > 0, "cancelled while queued for a retry"),
            ):
                done = done or _append(
                    session, job_id, (Job.state == JobState.queued, attempted), STATE_EVENT,
                    {"state": "cancelled", "reason": reason},
                    state=JobState.cancelled, reason=reason, finished_at=utcnow(),
                )  # fmt: skip
        if done is not None:
            break
        with session_scope() as session:
            asked = _append(
                session, job_id, (Job.state == JobState.running, Job.cancel_requested.is_(False)),
                CANCEL_EVENT, {}, cancel_requested=True,
            )  # fmt: skip
        job = get_job(job_id)
        # Neither matched while the job moved between the two (a worker claimed it, or the reaper
        # re-queued it): look again rather than answer a cancel that did nothing.
        if asked is not None or job.state.terminal or job.cancel_requested:
            break
    job = get_job(job_id)
    if not job.state.terminal and not job.cancel_requested:
        raise JobConflict(f"job {job_id} kept changing state while being cancelled; try again")
    if job.state.terminal and job.state != JobState.cancelled:
        raise JobConflict(f"job {job_id} already {job.state.value}; only queued or running jobs cancel")
    if job.state == JobState.cancelled and done is None:
        raise JobConflict(f"job {job_id} is already cancelled")
    return job


def mark_enqueued(job_id: str) -> None:
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.enqueued_at.is_(None))
            .values(enqueued_at=utcnow())
            .execution_options(synchronize_session=False)
        )


def fail_job(job_id: str, reason: str) -> bool:
    """Fail a queued or running job from outside its worker (e.g. it could not be enqueued)."""
    with session_scope() as session:
        seq = _append(
            session, job_id, (Job.state.in_([JobState.queued, JobState.running]),), STATE_EVENT,
            {"state": "failed", "reason": reason},
            state=JobState.failed, reason=reason, finished_at=utcnow(),
        )  # fmt: skip
    return seq is not None


@dataclass(frozen=True)
class Reaped:
    """A running job whose worker went silent, and what the reaper made of it."""

    job_id: str
    kind: str
    state: JobState  # queued (retried: its task must be sent again), failed, or cancelled
    reason: str


def reap_stale_jobs(settings: JobSettings | None = None, now: datetime | None = None) -> list[Reaped]:
    """Every running job whose heartbeat is older than the timeout: back to the queue while it has
    retries left, else failed (cancelled, if a cancel was requested). Returns what was reaped.

    A re-queued job has no ``enqueued_at``: :func:`unsent_retries` lists it until its task is sent.
    """
    settings = settings or JobSettings()
    now = now or utcnow()
    cutoff = now - timedelta(seconds=settings.heartbeat_timeout_s)
    reaped = []
    with session_scope() as session:
        stale = session.scalars(
            select(Job.id).where(Job.state == JobState.running, Job.heartbeat_at < cutoff)
        ).all()
    for job_id in stale:
        # Twice: a cancel requested between the read and the write makes the write miss; the second
        # read sees it and the job ends cancelled instead of being retried.
        for _ in range(2):
            done = _reap_one(job_id, settings, now, cutoff)
            if done is not None:
                if done:
                    log.warning("job %s: %s → %s", job_id, done[0].reason, done[0].state.value)
                    reaped.append(done[0])
                break
    return reaped


def _reap_one(job_id: str, settings: JobSettings, now: datetime, cutoff: datetime) -> list[Reaped] | None:
    """Reap one job if it is still stale: ``[Reaped]``; ``[]`` when it is not (any more); None when
    it changed between the read and the write (read it again)."""
    with session_scope() as session:
        row = session.execute(
            select(
                Job.kind, Job.worker, Job.heartbeat_at, Job.attempts, Job.max_retries, Job.cancel_requested,
            ).where(Job.id == job_id, Job.state == JobState.running, Job.heartbeat_at < cutoff)
        ).first()  # fmt: skip
    if row is None:
        return []
    kind, worker, beat, attempts, max_retries, cancel = row
    silent = (now - beat).total_seconds()
    lost = (
        f"worker lost: no heartbeat from {worker} for {silent:.0f} s "
        f"(timeout {settings.heartbeat_timeout_s:g} s)"
    )
    data: dict[str, Any] = {}
    if cancel:
        state, reason = JobState.cancelled, f"cancelled on request ({lost})"
        values: dict[str, Any] = {"finished_at": now}
    elif attempts <= max_retries:
        # attempts counts the starts so far: the next start is retry number `attempts`.
        state, reason = JobState.queued, f"{lost}; retry {attempts} of {max_retries}"
        values = {"enqueued_at": None}
        data = {"retry": attempts, "max_retries": max_retries}
    else:
        spent = f"; no retries left ({attempts} attempts)" if max_retries else ""
        state, reason = JobState.failed, lost + spent
        values = {"finished_at": now}
    with session_scope() as session:
        # Only if nobody changed the job meanwhile (its worker beat, another reaper got there, or a
        # cancel was requested: a retry must not outlive a cancel the API has acknowledged).
        seq = _append(
            session, job_id, (Job.state == JobState.running, Job.heartbeat_at == beat,
                              Job.attempts == attempts, Job.cancel_requested.is_(cancel)), STATE_EVENT,
            {"state": state.value, "reason": reason, **data},
            state=state, reason=reason, **values,
        )  # fmt: skip
    return None if seq is None else [Reaped(job_id, kind, state, reason)]


def unsent_retries() -> list[tuple[str, str]]:
    """(id, kind) of every re-queued job whose task was not sent yet (oldest first)."""
    with session_scope() as session:
        return [
            (job_id, kind)
            for job_id, kind in session.execute(
                select(Job.id, Job.kind)
                .where(Job.state == JobState.queued, Job.attempts > 0, Job.enqueued_at.is_(None))
                .order_by(Job.updated_at)
            )
        ]


@dataclass(frozen=True)
class Unclaimed:
    """A queued job nobody claimed in time: what the reconciler needs of it, and no more (it reads
    every such job on each pass)."""

    id: str
    kind: str
    attempts: int
    enqueued_at: datetime | None


def unclaimed_jobs(settings: JobSettings | None = None, now: datetime | None = None) -> list[Unclaimed]:
    """Queued jobs nobody claimed within ``lost_message_s`` of being sent, or of being created if
    never sent (oldest first): those whose message the broker may have lost."""
    settings = settings or JobSettings()
    cutoff = (now or utcnow()) - timedelta(seconds=settings.lost_message_s)
    sent_long_ago = Job.enqueued_at < cutoff
    never_sent = Job.enqueued_at.is_(None) & (Job.updated_at < cutoff)
    with session_scope() as session:
        rows = session.execute(
            select(Job.id, Job.kind, Job.attempts, Job.enqueued_at)
            .where(Job.state == JobState.queued, sent_long_ago | never_sent)
            .order_by(Job.updated_at)
        ).all()
    return [Unclaimed(*row) for row in rows]


def claim_resend(job: Unclaimed, now: datetime | None = None) -> bool:
    """Take the right to send ``job``'s message again: True for exactly one caller while the job is
    still queued as ``job`` saw it (several API processes reconcile at once)."""
    with session_scope() as session:
        done = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.state == JobState.queued, Job.attempts == job.attempts,
                   (Job.enqueued_at == job.enqueued_at) if job.enqueued_at else Job.enqueued_at.is_(None))
            .values(enqueued_at=now or utcnow())
            .execution_options(synchronize_session=False)
        )  # fmt: skip
        return done.rowcount == 1


# --- worker side: run one job ------------------------------------------------------------------


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class JobContext:
    """What a running job's code uses to report and to learn that it should stop."""

    def __init__(self, job: JobInfo, worker: str, settings: JobSettings) -> None:
        self.job_id = job.id
        self.kind = job.kind
        self.config: dict[str, Any] = job.config
        self.worker = worker
        self.attempt = job.attempts  # 1 for the first run, 2 for the first retry, …
        self._settings = settings
        # The reaper gives the job away after heartbeat_timeout_s of silence; a worker that could
        # not beat for one period less than that stops first, so two attempts never overlap.
        self._fence_s = settings.heartbeat_timeout_s - settings.heartbeat_s
        self._last_beat = time.monotonic()
        self._cancel = threading.Event()
        self._lost = threading.Event()
        self._io = threading.Lock()  # one writer at a time: the job's thread or the heartbeat
        self._pending: Progress | None = None
        self._sent: Progress | None = None
        self._last_flush = -math.inf  # the first report is always written

    @property
    def _mine(self) -> tuple[ColumnElement[bool], ...]:
        return (Job.state == JobState.running, Job.worker == self.worker, Job.attempts == self.attempt)

    def cancel_requested(self) -> bool:
        """True once a cancel was requested, the job was taken from this worker, or its heartbeat
        could not be renewed for so long that the reaper may give it to another worker: stop soon."""
        if not self._cancel.is_set() and not self._lost.is_set():
            silent = time.monotonic() - self._last_beat
            if silent > self._fence_s:
                log.error(
                    "job %s: no heartbeat recorded for %.1f s (the reaper takes the job after %g s); "
                    "stopping so that a retry never runs beside this attempt",
                    self.job_id, silent, self._settings.heartbeat_timeout_s,
                )  # fmt: skip
                self._lose()
        return self._cancel.is_set() or self._lost.is_set()

    def raise_if_cancelled(self) -> None:
        if self.cancel_requested():
            raise JobCancelled(f"job {self.job_id}: cancel requested")

    @property
    def lost(self) -> bool:
        """The job is no longer this worker's (the reaper took it after missed heartbeats)."""
        return self._lost.is_set()

    def progress(self, done: int, total: int | None = None, message: str = "") -> None:
        """Report ``done`` of ``total`` units; frequent calls are merged (the latest is always written)."""
        if done < 0 or (total is not None and total < 0):
            raise ValueError(f"job {self.job_id}: progress must be non-negative, got {done}/{total}")
        self._pending = Progress(done=done, total=total, message=message)
        finished = total is not None and done >= total
        if finished or time.monotonic() - self._last_flush >= self._settings.progress_interval_s:
            self.flush_progress()

    def flush_progress(self) -> None:
        with self._io:
            pending, self._pending = self._pending, None
            if pending is None or pending == self._sent or self.lost:
                return
            with session_scope() as session:
                seq = _append(
                    session, self.job_id, self._mine, PROGRESS_EVENT, pending.model_dump(),
                    progress_done=pending.done, progress_total=pending.total,
                    progress_message=pending.message,
                )  # fmt: skip
            self._last_flush = time.monotonic()
            if seq is None:
                self._lose()
            else:
                self._sent = pending

    def event(self, type: str, data: dict[str, Any]) -> int | None:
        """Append an event (``"metrics"`` with one step's values, ``"result"`` with an eval summary, …).

        Returns its number, or None when the job is no longer this worker's.
        """
        if not _EVENT_TYPE.fullmatch(type) or type in RESERVED_EVENTS:
            raise ValueError(
                f"job {self.job_id}: event type {type!r} must match {_EVENT_TYPE.pattern} and not be one "
                f"of {sorted(RESERVED_EVENTS)}"
            )
        if not isinstance(data, dict):
            raise TypeError(f"job {self.job_id}: event data must be a dict, got {type(data).__name__}")
        data = jsonable(data, f"{type} event")
        with self._io:
            if self.lost:
                return None
            with session_scope() as session:
                seq = _append(session, self.job_id, self._mine, type, data)
            if seq is None:
                self._lose()
            return seq

    def set_result(self, result: dict[str, Any]) -> None:
        """The job's final summary (shown with the job and in its last state event)."""
        result = jsonable(result, "result")
        with self._io:
            # A fenced-off attempt may still match the row until the reaper acts: it must not write.
            if self.lost:
                return
            with session_scope() as session:
                written = session.execute(
                    update(Job)
                    .where(Job.id == self.job_id, *self._mine)
                    .values(result=result, updated_at=utcnow())
                    .execution_options(synchronize_session=False)
                ).rowcount
        if not written:
            self._lose()

    def heartbeat(self) -> None:
        """Renew the heartbeat, pick up a cancel request, write merged progress."""
        self.flush_progress()
        with self._io:
            if self.lost:
                return
            with session_scope() as session:
                row = session.execute(
                    update(Job)
                    .where(Job.id == self.job_id, *self._mine)
                    .values(heartbeat_at=utcnow())
                    .returning(Job.cancel_requested)
                    .execution_options(synchronize_session=False)
                ).first()
        if row is None:
            self._lose()
            return
        self._last_beat = time.monotonic()
        if row[0]:
            self._cancel.set()

    def _lose(self) -> None:
        if not self._lost.is_set():
            log.error(
                "job %s (attempt %d) is no longer run by %s; stopping", self.job_id, self.attempt, self.worker
            )
        # Not _cancel: that one means the database asked for a cancel, and only then does the job end
        # cancelled; a lost job's end is the reaper's to decide.
        self._lost.set()

    def _finish(self, state: JobState, reason: str | None, extra: dict[str, Any] | None = None) -> None:
        self.flush_progress()
        with self._io, session_scope() as session:
            result = session.scalar(select(Job.result).where(Job.id == self.job_id))
            data = {"state": state.value, "reason": reason, "result": result, **(extra or {})}
            seq = _append(
                session, self.job_id, self._mine, STATE_EVENT, data,
                state=state, reason=reason, finished_at=utcnow(),
            )  # fmt: skip
        if seq is None:
            log.error(
                "job %s: could not record %s (no longer run by %s)", self.job_id, state.value, self.worker
            )


class _Heartbeat:
    def __init__(self, ctx: JobContext, period_s: float) -> None:
        self._ctx, self._period = ctx, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{ctx.job_id[:8]}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._ctx.heartbeat()
            except SQLAlchemyError as exc:
                # A database blip must not kill the job; if it lasts, the reaper decides.
                log.warning("job %s: heartbeat failed: %s", self._ctx.job_id, exc)
            if self._ctx.lost:
                return

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _claim(job_id: str, worker: str, settings: JobSettings) -> JobInfo:
    for _ in range(2):
        now = utcnow()
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.state.terminal:
                raise JobNotRunnable(job_id, job.state, "already finished")
            if job.state == JobState.running:
                silent = (now - job.heartbeat_at).total_seconds() if job.heartbeat_at else math.inf
                if silent < settings.heartbeat_timeout_s:
                    raise JobNotRunnable(
                        job_id, job.state, f"running on {job.worker} (heartbeat {silent:.1f} s ago)"
                    )
            if job.state == JobState.queued and job.cancel_requested:
                # Re-queued while its cancel was being requested: the cancel was acknowledged, so end
                # it here instead of running it (and resetting the flag below).
                ended = _append(
                    session, job_id, (Job.state == JobState.queued, Job.attempts == job.attempts,
                                      Job.cancel_requested.is_(True)), STATE_EVENT,
                    {"state": "cancelled", "reason": "cancelled while queued for a retry"},
                    state=JobState.cancelled, reason="cancelled while queued for a retry", finished_at=now,
                )  # fmt: skip
                if ended is None:
                    continue
                break
            attempt = job.attempts + 1
            claimed = _append(
                session, job_id, (Job.state == JobState.queued, Job.attempts == job.attempts), STATE_EVENT,
                {"state": "running", "worker": worker, "attempt": attempt},
                state=JobState.running, worker=worker, started_at=now, heartbeat_at=now,
                attempts=attempt, cancel_requested=False, reason=None,
            )  # fmt: skip
        if claimed is not None:
            return get_job(job_id)
        # Running with a stale heartbeat (its worker died: this is the broker redelivering its
        # message), or claimed by another worker just now. A reaped job with retries left is queued
        # again: this message may run it (a message the API sends for it later is then dropped).
        if not any(r.job_id == job_id and r.state == JobState.queued for r in reap_stale_jobs(settings)):
            break
    job_now = get_job(job_id)
    raise JobNotRunnable(job_id, job_now.state, job_now.reason or f"claimed by {job_now.worker}")


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:_REASON_CHARS]


@contextmanager
def run_job(job_id: str, *, worker: str | None = None) -> Iterator[JobContext]:
    """Run a queued job here: claim it, heartbeat while the body runs, record how it ended.

    The body returning ends the job ``succeeded`` (``cancelled`` if a cancel was requested meanwhile);
    :class:`JobCancelled` ends it ``cancelled``; any other exception ends it ``failed`` with the
    exception as the reason and is re-raised. An attempt that lost its job (its heartbeat fence ran
    out, or the reaper took it) records no end at all: the reaper decides. Raises :class:`JobNotRunnable` without running the body
    when the job is finished or running elsewhere, :class:`JobNotFound` for an unknown id.
    """
    settings = JobSettings()
    worker = worker or default_worker_id()
    ctx = JobContext(_claim(job_id, worker, settings), worker, settings)
    log.info("job %s (%s) running on %s", job_id, ctx.kind, worker)
    try:
        with _Heartbeat(ctx, settings.heartbeat_s):
            yield ctx
    except BaseException as exc:
        if ctx.lost:
            # The row may still be ours until the reaper looks: whatever stopped the body, the
            # reaper decides how the job ends (a retry, if any are left).
            if isinstance(exc, JobCancelled):
                return
            raise
        if isinstance(exc, JobCancelled) and ctx._cancel.is_set():
            ctx._finish(JobState.cancelled, "cancelled on request")
            return
        tb = "".join(traceback.format_exception(exc))[-_TRACEBACK_CHARS:]
        ctx._finish(JobState.failed, _describe(exc), {"traceback": tb})
        raise
    else:
        if ctx.lost:
            return
        # Not cancel_requested(): once the body is done a late heartbeat stops nothing, and the
        # final write is refused anyway if the job was taken away meanwhile.
        if ctx._cancel.is_set():
            ctx._finish(JobState.cancelled, "cancelled on request")
        else:
            ctx._finish(JobState.succeeded, None)
