"""What the routes call: submit (validate, record, enqueue), cancel, read; no HTTP in here."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

from services.api.auth import AuthFailed, Principal
from services.api.kinds import JobKind, KindUnavailable, kind_spec
from services.api.schemas import CacheStatsOut
from services.api.settings import ApiSettings
from services.api.tokens import Scope
from services.common.broker_inbox import waiting_job_ids
from services.common.celery_app import get_celery
from services.common.db.models import JobState
from services.common.jobs import (
    JobInfo,
    JobNotFound,
    JobSettings,
    Reaped,
    claim_resend,
    create_or_get_job,
    fail_job,
    get_job,
    job_events,
    mark_enqueued,
    reap_stale_jobs,
    request_cancel,
    unclaimed_jobs,
    unsent_retries,
)
from services.common.jobs import metrics_steps as job_metrics_steps

log = logging.getLogger(__name__)

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
    def __init__(self, celery: Celery | None = None, settings: ApiSettings | None = None) -> None:
        self._celery = celery
        self.settings = settings or ApiSettings()
        self._next_reconcile = 0.0  # monotonic time of the next lost-message check

    @property
    def celery(self) -> Celery:
        # Looked up on use: the API starts, and serves reads, while the broker is away.
        return self._celery or get_celery()

    def submit(
        self,
        kind: JobKind,
        config: dict[str, Any],
        idempotency_key: str | None,
        owner: str | None,
        max_retries: int | None = None,
    ) -> tuple[JobInfo, bool]:
        """Validate with the kind's model, record (once per idempotency key), enqueue.

        Raises ``pydantic.ValidationError``, ``KindUnavailable``, ``JobConflict`` or :class:`BrokerUnavailable`.
        """
        spec = kind_spec(kind)
        validated = spec.validate(config)
        if max_retries is None:
            max_retries = self.settings.default_max_retries(kind)
        job, created = create_or_get_job(
            kind.value, validated, idempotency_key, owner, max_retries, exclusive=spec.exclusive
        )
        if job.state == JobState.queued and job.enqueued_at is None:
            # Also for a replayed key whose first attempt died before enqueueing; a duplicate message
            # is harmless (the job is claimed once).
            try:
                self._send(job.id, kind)
            except (KombuError, OSError) as exc:
                reason = f"could not enqueue on the broker: {exc}"
                fail_job(job.id, reason)
                raise BrokerUnavailable(f"job {job.id}: {reason}") from exc
            job = get_job(job.id)
        return job, created

    def _send(self, job_id: str, kind: JobKind | str) -> None:
        spec = kind_spec(kind)
        self.celery.send_task(spec.task, kwargs={"job_id": job_id}, queue=spec.queue)
        mark_enqueued(job_id)

    def reap(self) -> list[Reaped]:
        """Take running jobs from workers that went silent, then send the task of every job that
        went back to the queue. A retry the broker refuses stays queued and is sent on a later call."""
        reaped = reap_stale_jobs()
        for job_id, kind in unsent_retries():
            try:
                self._send(job_id, kind)
            except KindUnavailable as exc:
                fail_job(job_id, f"could not retry: {exc}")
                continue
            except (KombuError, OSError) as exc:
                log.warning(
                    "job %s: could not send its retry to the broker (tried again later): %s", job_id, exc
                )
                break
            log.info("job %s: retry sent", job_id)
        self._resend_lost()
        return reaped

    def _resend_lost(self) -> list[str]:
        """Send again the task of every job that waited unclaimed for ``lost_message_s`` and whose
        message the broker no longer holds (it restarted without its data). Returns their ids.

        At most every quarter of the bound, not on every reaper pass: it reads every long-queued job,
        and a long queue behind busy workers is normal."""
        settings = JobSettings()
        now = time.monotonic()
        if now < self._next_reconcile:
            return []
        self._next_reconcile = now + settings.lost_message_s / 4
        unclaimed = unclaimed_jobs(settings)
        if not unclaimed:
            return []
        queues = {}
        for job in unclaimed:
            try:
                queues[job.id] = kind_spec(job.kind).queue
            except (KindUnavailable, ValueError):
                continue  # its service is not installed here: the reaper of an API that has it sends it
        try:
            waiting = waiting_job_ids(self.celery, set(queues.values()))
        except (KombuError, OSError, RedisError) as exc:
            log.warning("could not read the broker's queues (tried again later): %s", exc)
            return []
        if waiting is None:
            return []  # a broker whose queues cannot be read: never guess
        resent = []
        for job in unclaimed:
            if job.id not in queues or job.id in waiting or not claim_resend(job):
                continue
            try:
                self._send(job.id, job.kind)
            except (KombuError, OSError) as exc:
                log.warning("job %s: could not send its lost message again (tried later): %s", job.id, exc)
                break
            log.warning("job %s: queued with no message on the broker; its task was sent again", job.id)
            resent.append(job.id)
        return resent

    def cancel(self, job_id: str, principal: Principal) -> JobInfo:
        job = get_job(job_id)
        if principal.name is not None and not principal.allows(Scope.admin) and job.owner != principal.name:
            raise AuthFailed(
                403, f"job {job_id} belongs to {job.owner!r}; cancelling it needs the admin scope"
            )
        return request_cancel(job_id)


def metrics_steps(job_id: str, after: int = 0) -> tuple[list[dict[str, Any]], int, int | None]:
    """The job's training steps (each once, a dict with ``step``), the number of the last event read,
    and the step after which a rewind among those events superseded what came before (or None)."""
    get_job(job_id)
    return job_metrics_steps(job_id, after)


def results(job_id: str) -> list[dict[str, Any]]:
    """The latest summary of each benchmark, in the order the benchmarks first reported: a retried
    eval reports again the benchmarks its earlier attempt finished."""
    get_job(job_id)
    latest: dict[Any, dict[str, Any]] = {}
    for event in job_events(job_id, types=[RESULT_EVENT]):
        latest[event.data.get("benchmark", ("event", event.seq))] = event.data
    return list(latest.values())


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
