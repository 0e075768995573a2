"""ORM tables. Schema changes go through an Alembic revision in ``migrations/versions``."""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
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
    # failed for a reason of the machine's (ENOSPC, EIO, a timeout), not the video's: the next request
    # decodes it again without --retry-failed
    retryable: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
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


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every backend (SQLite hands back naive values otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class JobState(enum.StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.succeeded, JobState.failed, JobState.cancelled)


LIVE_STATES_SQL = "state IN ('queued', 'running')"


class Job(Base):
    """One submitted unit of work (preprocess, train, eval) and its lifecycle (SPEC §7)."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("uq_jobs_idempotency_scope", "idempotency_scope", unique=True),
        Index(
            "uq_jobs_live_exclusive",
            "exclusive_key",
            unique=True,
            sqlite_where=text(LIVE_STATES_SQL),
            postgresql_where=text(LIVE_STATES_SQL),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    state: Mapped[JobState] = mapped_column(
        Enum(JobState, name="job_state", native_enum=False, length=16), default=JobState.queued, index=True
    )
    config: Mapped[dict] = mapped_column(JSON)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    # sha256 of (owner, key): a key names one job per owner (token), never another owner's
    idempotency_scope: Mapped[str | None] = mapped_column(String(64))
    # sha256 of (kind, the kind's exclusive config value) while it matters: at most one live (queued or
    # running) job holds a value (uq_jobs_live_exclusive), e.g. one train job per output folder
    exclusive_key: Mapped[str | None] = mapped_column(String(64))
    owner: Mapped[str | None] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict | None] = mapped_column(JSON)
    progress_done: Mapped[int] = mapped_column(BigInteger, default=0)
    progress_total: Mapped[int | None] = mapped_column(BigInteger)
    progress_message: Mapped[str] = mapped_column(Text, default="")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    worker: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Re-queues allowed when the job's worker dies (heartbeat timeout); attempts - 1 of them are used.
    max_retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Per-job event counter: bumped by the same UPDATE that locks the row, so event numbers are
    # gap-free and in commit order (what SSE `Last-Event-ID` resumes from).
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class JobEvent(Base):
    """Something a job reported: a state change, progress, a metrics step, an eval result."""

    __tablename__ = "job_events"
    __table_args__ = (UniqueConstraint("job_id", "seq", name="uq_job_events_job_seq"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    type: Mapped[str] = mapped_column(String(32), index=True)
    data: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiToken(Base):
    """A bearer token of the jobs API: only its SHA-256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class TrainRun(Base):
    """One training run (``reelrl train``): where it writes, its resolved config, how far it got."""

    __tablename__ = "train_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    output_dir: Mapped[str] = mapped_column(Text)
    config: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    job_id: Mapped[str | None] = mapped_column(String(32), index=True)
    last_step: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TrainStepMetrics(Base):
    """The metrics of one training step (the same object as that step's line of ``metrics.jsonl``)."""

    __tablename__ = "train_step_metrics"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_train_step_metrics_run_step"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("train_runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class EvalRun(Base):
    """One evaluation run (``reelrl eval run`` or an ``eval`` job): its config, manifest and summaries."""

    __tablename__ = "eval_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[str | None] = mapped_column(String(32), index=True)
    model: Mapped[str] = mapped_column(Text)
    family: Mapped[str] = mapped_column(String(32))
    benchmarks: Mapped[list[str]] = mapped_column(JSON)
    config: Mapped[dict] = mapped_column(JSON)
    manifest: Mapped[dict] = mapped_column(JSON)
    output_dir: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    summaries: Mapped[dict | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class EvalResult(Base):
    """One scored sample of a run, written the moment it exists; (run, benchmark, sample) is unique, so
    a restarted run skips finished samples and never duplicates one."""

    __tablename__ = "eval_results"
    __table_args__ = (
        UniqueConstraint("run_id", "benchmark", "sample_id", name="uq_eval_results_run_benchmark_sample"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    benchmark: Mapped[str] = mapped_column(String(64))
    sample_id: Mapped[str] = mapped_column(String(512))
    response: Mapped[str | None] = mapped_column(Text)
    accuracy: Mapped[float] = mapped_column(Float)
    format: Mapped[float] = mapped_column(Float, default=0.0)
    extracted: Mapped[dict | list | str | float | None] = mapped_column(JSON)
    details: Mapped[dict] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    judged: Mapped[bool] = mapped_column(Boolean, default=False)
    judge_response: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    response_tokens: Mapped[int | None] = mapped_column(Integer)
    latency_s: Mapped[float | None] = mapped_column(Float)
    clip_meta: Mapped[list | None] = mapped_column(JSON)
    # model, family, clip parameters (frames, fps, pixel budgets), prompt template version, sampling
    # parameters and code version of this result
    manifest: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class OutputFile(Base):
    """A file a job or command wrote as its output, with the digest of what it wrote: the only existing
    files an output may replace (services/common/outputs.py). Keyed by the sha256 of the resolved path,
    which may be longer than an index allows."""

    __tablename__ = "output_files"

    path_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(32))
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[str | None] = mapped_column(String(32))
    written_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
