"""ORM tables. Schema changes go through an Alembic revision in ``migrations/versions``."""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import JSON, BigInteger, DateTime, Enum, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class ClipStatus(enum.StrEnum):
    queued = "queued"
    running = "running"
    ready = "ready"
    failed = "failed"


class VideoAsset(Base):
    """One video file content (by hash), wherever it is stored."""

    __tablename__ = "video_assets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(80), unique=True, index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    duration_s: Mapped[float | None] = mapped_column(Float)
    fps: Mapped[float | None] = mapped_column(Float)
    frame_count: Mapped[int | None] = mapped_column(Integer)
    width: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    paths: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    clips: Mapped[list[FrameClip]] = relationship(back_populates="asset")


class FrameClip(Base):
    """One decoded, sampled and resized clip: a video asset under one parameter set."""

    __tablename__ = "frame_clips"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The unique key is what makes concurrent requests for one clip decode it once.
    key: Mapped[str] = mapped_column(String(80), unique=True, index=True)
    asset_id: Mapped[int] = mapped_column(ForeignKey("video_assets.id"), index=True)
    params: Mapped[dict] = mapped_column(JSON)
    status: Mapped[ClipStatus] = mapped_column(
        Enum(ClipStatus, name="clip_status", native_enum=False, length=16),
        default=ClipStatus.queued,
        index=True,
    )
    error: Mapped[str | None] = mapped_column(Text)
    num_frames: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    width: Mapped[int | None] = mapped_column(Integer)
    nbytes: Mapped[int | None] = mapped_column(BigInteger)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    requests: Mapped[int] = mapped_column(Integer, default=0)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    timings: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    asset: Mapped[VideoAsset] = relationship(back_populates="clips")
