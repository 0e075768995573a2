"""The frame store's index in the database: assets, clip requests, claims with leases, outcomes.

Claims are single UPDATE statements guarded by status and lease, so any number of workers on any
broker decode a clip once; a worker that dies stops renewing its lease and the clip is taken over.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.common.db.models import ClipStatus, FrameClip, VideoAsset

T = TypeVar("T")


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes for timezone-aware columns.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _get_or_create(session: Session, query: Select[tuple[T]], make: Callable[[], T]) -> T:
    """The row ``query`` finds, or a new one from ``make``. Two processes may insert at once: the unique
    constraint lets one win, and the other reads the winner's row."""
    row = session.scalar(query)
    if row is None:
        try:
            with session.begin_nested():
                row = make()
                session.add(row)
        except IntegrityError:
            row = session.scalars(query).one()
    return row


def register_asset(session: Session, content_hash: str, size_bytes: int, path: str) -> VideoAsset:
    """The asset row for these bytes (created if new), with ``path`` among its known paths."""
    asset = _get_or_create(
        session,
        select(VideoAsset).where(VideoAsset.content_hash == content_hash),
        lambda: VideoAsset(content_hash=content_hash, size_bytes=size_bytes, paths=[path]),
    )
    if path not in asset.paths:
        asset.paths = [*asset.paths, path]
    return asset


def request_clip(session: Session, key: str, asset: VideoAsset, params: dict[str, Any]) -> FrameClip:
    """Record a request for a clip; a new or previously failed clip becomes ``queued``."""
    clip = _get_or_create(
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
    clip.requests += 1
    if clip.status == ClipStatus.ready:
        clip.hits += 1
    elif clip.status == ClipStatus.failed:
        clip.status, clip.error, clip.attempts = ClipStatus.queued, None, 0
    return clip


class Claim(enum.StrEnum):
    claimed = "claimed"
    ready = "ready"
    failed = "failed"
    busy = "busy"  # another live worker holds the lease
    missing = "missing"


@dataclass
class ClaimResult:
    outcome: Claim
    clip: FrameClip | None = None
    lease_until: datetime | None = None


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
        if clip.attempts > max_attempts:
            fail_clip(session, key, worker, f"gave up after {max_attempts} attempts (workers died or hung)")
            return ClaimResult(Claim.failed, clip)
        return ClaimResult(Claim.claimed, clip)
    if clip.status == ClipStatus.ready:
        return ClaimResult(Claim.ready, clip)
    if clip.status == ClipStatus.failed:
        return ClaimResult(Claim.failed, clip)
    return ClaimResult(Claim.busy, clip, _aware(clip.lease_until))


def renew_lease(session: Session, key: str, worker: str, lease_s: float) -> bool:
    result = session.execute(
        update(FrameClip)
        .where(FrameClip.key == key, FrameClip.worker == worker, FrameClip.status == ClipStatus.running)
        .values(lease_until=_now() + timedelta(seconds=lease_s))
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1


def complete_clip(session: Session, key: str, worker: str, meta: dict[str, Any], nbytes: int) -> None:
    clip = session.scalars(select(FrameClip).where(FrameClip.key == key)).one()
    clip.status, clip.error = ClipStatus.ready, None
    clip.num_frames, clip.height, clip.width = meta["num_frames"], meta["height"], meta["width"]
    clip.nbytes, clip.timings, clip.worker = nbytes, meta.get("timings"), worker
    clip.finished_at, clip.lease_until = _now(), None
    asset = clip.asset
    asset.duration_s, asset.fps, asset.frame_count = meta["duration"], meta["fps"], meta["total_num_frames"]
    asset.height, asset.width = meta["source_height"], meta["source_width"]
    session.commit()


def fail_clip(session: Session, key: str, worker: str, error: str) -> None:
    session.execute(
        update(FrameClip)
        .where(FrameClip.key == key, FrameClip.status != ClipStatus.ready)
        .values(
            status=ClipStatus.failed, error=error[:4000], worker=worker, finished_at=_now(), lease_until=None
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()


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
