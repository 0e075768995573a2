"""The frame store's index in the database: assets, clip requests, claims with leases, outcomes.

Claims are single UPDATE statements guarded by status and lease, so any number of workers on any
broker decode a clip once; a worker that dies stops renewing its lease and the clip is taken over.
A claim is identified by its worker and attempt number (every claim increments ``attempts``): lease
renewals and the outcome are accepted only from the holder of the current, unexpired claim, checked in
the same UPDATE, so a worker whose lease lapsed cannot overwrite what the clip's new owner records.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.common.db.models import ClipStatus, FrameClip, VideoAsset

T = TypeVar("T")
log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes for timezone-aware columns.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _get_or_create(session: Session, query: Select[tuple[T]], make: Callable[[], T]) -> tuple[T, bool]:
    """The row ``query`` finds, or a new one from ``make``, and whether this call created it. Two
    processes may insert at once: the unique constraint lets one win, and the other reads its row."""
    row = session.scalar(query.execution_options(populate_existing=True))
    if row is not None:
        return row, False
    try:
        with session.begin_nested():
            row = make()
            session.add(row)
        return row, True
    except IntegrityError:
        return session.scalars(query).one(), False


def register_asset(session: Session, content_hash: str, size_bytes: int, path: str) -> VideoAsset:
    """The asset row for these bytes (created if new), with ``path`` among its known paths."""
    asset, _ = _get_or_create(
        session,
        select(VideoAsset).where(VideoAsset.content_hash == content_hash),
        lambda: VideoAsset(content_hash=content_hash, size_bytes=size_bytes, paths=[path]),
    )
    if path not in asset.paths:
        asset.paths = [*asset.paths, path]
    return asset


class Requested(enum.StrEnum):
    """What one request for a clip found, from the requester's point of view."""

    queued = "queued"  # this request queued it: new, lost from the store, or a failure retried
    cached = "cached"  # ready, and its entry is in the store
    pending = "pending"  # another request queued it first; a worker has it or will
    known_failed = "known_failed"  # failed before; not decoded again unless retried explicitly


@dataclass
class ClipRequest:
    outcome: Requested
    error: str | None = None  # the recorded failure, for ``known_failed``


def request_clip(
    session: Session,
    key: str,
    asset: VideoAsset,
    params: dict[str, Any],
    *,
    present: Callable[[str], bool],
    retry_failed: bool = False,
) -> ClipRequest:
    """Record a request for a clip and say whether the requester must wait for a decode.

    A clip marked ready counts as a hit only if ``present(key)`` (the store holds its entry; a cheap
    check of the entry's files): a ready clip whose entry is gone (a wiped frame root, a rename lost in
    a crash) is queued again and logged. A failed clip (same bytes and parameters) stays failed unless
    ``retry_failed``. Every state change is one UPDATE guarded by the state it leaves, so of two
    concurrent requests exactly one queues the clip; the other finds it ``pending``.
    """
    clip, created = _get_or_create(
        session,
        select(FrameClip).where(FrameClip.key == key),
        lambda: FrameClip(
            key=key,
            asset_id=asset.id,
            params=params,
            status=ClipStatus.queued,
            attempts=0,
            requests=0,
            hits=0,
        ),
    )
    _bump(session, key, requests=FrameClip.requests + 1)
    if created:
        return ClipRequest(Requested.queued)
    if clip.status == ClipStatus.ready:
        if present(key):
            _bump(session, key, hits=FrameClip.hits + 1)
            return ClipRequest(Requested.cached)
        if _requeue(session, key, ClipStatus.ready):
            log.warning(
                "clip %s is ready in the index but missing from the frame store; decoding it again", key
            )
            return ClipRequest(Requested.queued)
        return ClipRequest(Requested.pending)
    if clip.status == ClipStatus.failed:
        if not retry_failed and not clip.retryable:
            return ClipRequest(Requested.known_failed, clip.error)
        return ClipRequest(
            Requested.queued if _requeue(session, key, ClipStatus.failed) else Requested.pending
        )
    return ClipRequest(Requested.pending)


def _bump(session: Session, key: str, **values: Any) -> None:
    session.execute(
        update(FrameClip)
        .where(FrameClip.key == key)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def _requeue(session: Session, key: str, leaving: ClipStatus) -> bool:
    """Move the clip from ``leaving`` back to queued (fresh attempts); False if it had left it already."""
    result = session.execute(
        update(FrameClip)
        .where(FrameClip.key == key, FrameClip.status == leaving)
        .values(status=ClipStatus.queued, error=None, attempts=0, worker=None, lease_until=None)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


class Claim(enum.StrEnum):
    claimed = "claimed"
    ready = "ready"
    failed = "failed"
    busy = "busy"  # another live worker holds the lease
    missing = "missing"


@dataclass(frozen=True)
class ClaimToken:
    """One claim of one clip: its worker and the attempt number the claim was given."""

    key: str
    worker: str
    attempt: int


@dataclass
class ClaimResult:
    outcome: Claim
    clip: FrameClip | None = None
    lease_until: datetime | None = None
    token: ClaimToken | None = None  # set when ``claimed``


def claim_clip(session: Session, key: str, worker: str, lease_s: float, max_attempts: int) -> ClaimResult:
    now = _now()
    result = session.execute(
        update(FrameClip)
        .where(
            FrameClip.key == key,
            or_(
                FrameClip.status == ClipStatus.queued,
                (FrameClip.status == ClipStatus.running) & (FrameClip.lease_until < now),
            ),
        )
        .values(
            status=ClipStatus.running,
            worker=worker,
            lease_until=now + timedelta(seconds=lease_s),
            attempts=FrameClip.attempts + 1,
            started_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    clip = session.scalar(
        select(FrameClip).where(FrameClip.key == key).execution_options(populate_existing=True)
    )
    if clip is None:
        return ClaimResult(Claim.missing)
    if result.rowcount == 1:
        token = ClaimToken(key, worker, clip.attempts)
        if clip.attempts > max_attempts:
            fail_clip(session, token, f"gave up after {max_attempts} attempts (workers died or hung)")
            session.refresh(clip)
            return ClaimResult(Claim.failed, clip)
        return ClaimResult(Claim.claimed, clip, _aware(clip.lease_until), token)
    if clip.status == ClipStatus.ready:
        return ClaimResult(Claim.ready, clip)
    if clip.status == ClipStatus.failed:
        return ClaimResult(Claim.failed, clip)
    return ClaimResult(Claim.busy, clip, _aware(clip.lease_until))


def _held(token: ClaimToken):
    """WHERE clause: ``token`` is the clip's current claim and its lease has not lapsed."""
    return (
        (FrameClip.key == token.key)
        & (FrameClip.status == ClipStatus.running)
        & (FrameClip.worker == token.worker)
        & (FrameClip.attempts == token.attempt)
        & (FrameClip.lease_until >= _now())
    )


def renew_lease(session: Session, token: ClaimToken, lease_s: float) -> bool:
    """Extend the lease; False if the claim was lost (lapsed, taken over, or the clip finished)."""
    result = session.execute(
        update(FrameClip)
        .where(_held(token))
        .values(lease_until=_now() + timedelta(seconds=lease_s))
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1


def ready_values(meta: dict[str, Any], nbytes: int) -> dict[str, Any]:
    """Column values of a ready clip, from its entry's metadata."""
    return {
        "status": ClipStatus.ready,
        "error": None,
        "num_frames": meta["num_frames"],
        "height": meta["height"],
        "width": meta["width"],
        "nbytes": nbytes,
        "timings": meta.get("timings"),
        "finished_at": _now(),
        "lease_until": None,
    }


def record_source_facts(session: Session, key: str, meta: dict[str, Any]) -> None:
    """Copy the source video's facts from a clip's metadata onto its asset."""
    asset = session.scalars(select(VideoAsset).join(FrameClip).where(FrameClip.key == key)).one()
    # A windowed clip's duration and frame count are the window's; its source's carry ``source_``
    # names (entries written before windows existed have only the plain ones, and no window).
    asset.duration_s = meta.get("source_duration", meta["duration"])
    asset.frame_count = meta.get("source_total_num_frames", meta["total_num_frames"])
    asset.fps = meta["fps"]
    asset.height, asset.width = meta["source_height"], meta["source_width"]


def complete_clip(session: Session, token: ClaimToken, meta: dict[str, Any], nbytes: int) -> bool:
    """Mark the clip ready; False (nothing changed) if ``token`` no longer holds the clip."""
    result = session.execute(
        update(FrameClip)
        .where(_held(token))
        .values(**ready_values(meta, nbytes))
        .execution_options(synchronize_session=False)
    )
    if result.rowcount == 1:
        record_source_facts(session, token.key, meta)
    session.commit()
    return result.rowcount == 1


def fail_clip(session: Session, token: ClaimToken, error: str, *, retryable: bool = False) -> bool:
    """Mark the clip failed; False (nothing changed) if ``token`` no longer holds the clip.
    ``retryable``: the machine failed, not the video (the next request decodes it again)."""
    result = session.execute(
        update(FrameClip)
        .where(_held(token))
        .values(
            status=ClipStatus.failed,
            error=error[:4000],
            retryable=retryable,
            finished_at=_now(),
            lease_until=None,
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1


def statuses(session: Session, keys: list[str]) -> dict[str, tuple[ClipStatus, str | None, datetime | None]]:
    out: dict[str, tuple[ClipStatus, str | None, datetime | None]] = {}
    for start in range(0, len(keys), 500):
        rows = session.execute(
            select(FrameClip.key, FrameClip.status, FrameClip.error, FrameClip.lease_until).where(
                FrameClip.key.in_(keys[start : start + 500])
            )
        )
        for key, status, error, lease in rows:
            out[key] = (ClipStatus(status), error, _aware(lease))
    return out


@dataclass
class CacheStats:
    assets: int
    clips_by_status: dict[str, int]
    ready_bytes: int
    ready_frames: int
    requests: int
    hits: int
    recent_failures: list[tuple[str, str]]

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.requests if self.requests else 0.0


def cache_stats(session: Session, failures: int = 10) -> CacheStats:
    by_status = {
        ClipStatus(s).value: n
        for s, n in session.execute(select(FrameClip.status, func.count()).group_by(FrameClip.status))
    }
    ready = session.execute(
        select(
            func.coalesce(func.sum(FrameClip.nbytes), 0), func.coalesce(func.sum(FrameClip.num_frames), 0)
        ).where(FrameClip.status == ClipStatus.ready)
    ).one()
    req = session.execute(
        select(func.coalesce(func.sum(FrameClip.requests), 0), func.coalesce(func.sum(FrameClip.hits), 0))
    ).one()
    failed = session.execute(
        select(FrameClip.key, FrameClip.error)
        .where(FrameClip.status == ClipStatus.failed)
        .order_by(FrameClip.finished_at.desc())
        .limit(failures)
    ).all()
    return CacheStats(
        assets=session.scalar(select(func.count()).select_from(VideoAsset)) or 0,
        clips_by_status=by_status,
        ready_bytes=int(ready[0]),
        ready_frames=int(ready[1]),
        requests=int(req[0]),
        hits=int(req[1]),
        recent_failures=[(k, e or "") for k, e in failed],
    )
