"""What the routes call: submit (validate, record, enqueue), cancel, read; no HTTP in here."""

from __future__ import annotations

import logging
import re
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError

from services.api.auth import AuthFailed, Principal
from services.api.kinds import JobKind, kind_spec
from services.api.schemas import CacheStatsOut
from services.api.tokens import Scope
from services.common.celery_app import get_celery
from services.common.db.models import JobState
from services.common.jobs import (
    JobInfo,
    JobNotFound,
    create_or_get_job,
    fail_job,
    get_job,
    job_events,
    mark_enqueued,
    request_cancel,
)

log = logging.getLogger(__name__)

METRICS_EVENT = "metrics"
RESULT_EVENT = "result"


_JOB_ID = re.compile(r"[0-9a-f]{32}")


def checked_job_id(job_id: str) -> str:
    """``job_id`` if it has the form of one; anything else names no job (and never reaches the database)."""
    if not _JOB_ID.fullmatch(job_id):
        raise JobNotFound(job_id)
    return job_id


class BrokerUnavailable(RuntimeError):
    """The job was recorded but could not be queued (HTTP 503); it is marked failed."""


class JobService:
    def __init__(self, celery: Celery | None = None) -> None:
        self._celery = celery

    @property
    def celery(self) -> Celery:
        # Looked up on use: the API starts, and serves reads, while the broker is away.
        return self._celery or get_celery()

    def submit(
        self, kind: JobKind, config: dict[str, Any], idempotency_key: str | None, owner: str | None
    ) -> tuple[JobInfo, bool]:
        """Validate with the kind's model, record (once per idempotency key), enqueue.

        Raises ``pydantic.ValidationError``, ``KindUnavailable``, ``JobConflict`` or :class:`BrokerUnavailable`.
        """
        spec = kind_spec(kind)
        validated = spec.validate(config)
        job, created = create_or_get_job(kind.value, validated, idempotency_key, owner)
        if job.state == JobState.queued and job.enqueued_at is None:
            # Also for a replayed key whose first attempt died before enqueueing; a duplicate message
            # is harmless (the job is claimed once).
            try:
                self.celery.send_task(spec.task, kwargs={"job_id": job.id}, queue=spec.queue)
            except (KombuError, OSError) as exc:
                reason = f"could not enqueue on the broker: {exc}"
                fail_job(job.id, reason)
                raise BrokerUnavailable(f"job {job.id}: {reason}") from exc
            mark_enqueued(job.id)
            job = get_job(job.id)
        return job, created

    def cancel(self, job_id: str, principal: Principal) -> JobInfo:
        job = get_job(job_id)
        if principal.name is not None and not principal.allows(Scope.admin) and job.owner != principal.name:
            raise AuthFailed(
                403, f"job {job_id} belongs to {job.owner!r}; cancelling it needs the admin scope"
            )
        return request_cancel(job_id)


def metrics_steps(job_id: str, after: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The job's training step metrics (each a dict with ``step``) and the number of the last one read."""
    get_job(job_id)
    events = job_events(job_id, after=after, types=[METRICS_EVENT])
    return [e.data for e in events], (events[-1].seq if events else after)


def results(job_id: str) -> list[dict[str, Any]]:
    get_job(job_id)
    return [e.data for e in job_events(job_id, types=[RESULT_EVENT])]


def cache_stats() -> CacheStatsOut:
    """The frame store's statistics (the same numbers as `reelrl cache stats`)."""
    from services.common.db import session_scope
    from services.common.frames.index import cache_stats as index_stats
    from services.common.settings import get_settings

    with session_scope() as session:
        stats = index_stats(session)
    return CacheStatsOut(
        frame_root=str(get_settings().resolved_frame_root),
        assets=stats.assets,
        clips_by_status=stats.clips_by_status,
        ready_bytes=stats.ready_bytes,
        ready_frames=stats.ready_frames,
        requests=stats.requests,
        hits=stats.hits,
        hit_ratio=stats.hit_ratio,
        recent_failures=[{"key": k, "error": e} for k, e in stats.recent_failures],
    )
