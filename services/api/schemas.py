"""Bodies of the jobs API, split by direction (what clients send, what they get back)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from services.api.kinds import JobKind
from services.api.rollouts import RolloutGroup
from services.common.jobs import MAX_RETRIES_LIMIT, JobInfo

# Visible ASCII: keys travel in logs and URLs, and Postgres text cannot hold NUL.
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]{1,200}$"


class JobCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "kind": "preprocess",
                    "config": {
                        "dataset": "train.jsonl",
                        "out": "train.clips.jsonl",
                        "video_params": {"family": "qwen2_5_vl", "fps": 2.0, "max_frames": 64},
                    },
                    "idempotency_key": "nightly-2024-06-01",
                }
            ]
        },
    )

    kind: JobKind
    config: dict[str, Any] = Field(description="validated by the kind's own config model")
    idempotency_key: str | None = Field(
        None, pattern=IDEMPOTENCY_KEY_PATTERN, description="the same key always names the same job"
    )
    max_retries: StrictInt | None = Field(
        None,
        ge=0,
        le=MAX_RETRIES_LIMIT,
        description="re-queues if the job's worker dies (default: the kind's, REELRL_API_MAX_RETRIES)",
    )


class JobAccepted(BaseModel):
    id: str
    state: str
    created: bool = Field(description="false when the idempotency key named an existing job")


class JobList(BaseModel):
    items: list[JobInfo]
    total: int
    limit: int
    offset: int


class MetricsSeries(BaseModel):
    job_id: str
    steps: list[dict[str, Any]] = Field(description="one object per training step, from its metrics events")
    last_event: int = Field(description="pass as `after` to fetch only newer steps")
    rewind_after_step: int | None = Field(
        None,
        description="with `after`: a retried job resumed from this step's checkpoint since then; drop "
        "the steps above it fetched before, these replace them",
    )


class ResultList(BaseModel):
    job_id: str
    results: list[dict[str, Any]] = Field(description="evaluation summaries, one per benchmark")


class RolloutSteps(BaseModel):
    job_id: str
    steps: list[int] = Field(description="steps with a rollout log (trainer.rollout_log), ascending")


class RolloutStep(BaseModel):
    job_id: str
    step: int
    groups: list[RolloutGroup] = Field(description="the step's logged groups, as the trainer wrote them")


class CacheStatsOut(BaseModel):
    frame_root: str
    assets: int
    clips_by_status: dict[str, int]
    ready_bytes: int
    ready_frames: int
    requests: int
    hits: int
    hit_ratio: float
    recent_failures: list[dict[str, str]]


class Health(BaseModel):
    status: str


class Problem(BaseModel):
    detail: Any
