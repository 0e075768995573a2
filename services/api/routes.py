"""The REST routes (``/v1``, ``/healthz``, ``/metrics``): thin, over :mod:`services.api.service`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sse_starlette import EventSourceResponse

from services.api.auth import CurrentPrincipal
from services.api.json_body import StrictJsonRoute
from services.api.kinds import KINDS, JobKind, KindUnavailable
from services.api.rollouts import (
    CLIP_KEY_PATTERN,
    RolloutLogMissing,
    logged_clips,
    logged_steps,
    read_step,
    run_folder,
)
from services.api.schemas import (
    CacheStatsOut,
    Health,
    JobAccepted,
    JobCreate,
    JobList,
    MetricsSeries,
    Problem,
    ResultList,
    RolloutStep,
    RolloutSteps,
)
from services.api.service import cache_stats, checked_job_id, metrics_steps, results
from services.api.streams import job_event_stream, jobs_snapshot_stream
from services.api.thumbnails import CACHE_CONTROL, DEFAULT_SIZE, MAX_SIZE, MIN_SIZE, frame_store
from services.common.db import session_scope
from services.common.db.models import JobState
from services.common.jobs import JobInfo, get_job, list_jobs

router = APIRouter(route_class=StrictJsonRoute)

_MAX_SEQ = 2**62
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "no valid token"},
    403: {"model": Problem, "description": "the token lacks the scope"},
}
_NOT_FOUND = {404: {"model": Problem, "description": "no such job"}}
_NO_ROLLOUTS = {
    404: {
        "model": Problem,
        "description": "no such job, not a train job, or no log of that step (the detail says)",
    }
}
_BAD_LOG = {422: {"model": Problem, "description": "bad parameters, or the step's log file is unreadable"}}
_MAX_STEP = 10**9
_SSE = {200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}}


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=JobAccepted,
    responses={
        **_ERRORS,
        409: {
            "model": Problem,
            "description": "idempotency key reused for a different job, or a live train job writes the "
            "same trainer.output_dir",
        },
        413: {"model": Problem, "description": "body too large"},
        503: {"model": Problem, "description": "the broker is unreachable"},
    },
)
def submit_job(body: JobCreate, principal: CurrentPrincipal, request: Request) -> JobAccepted:
    """Validate the config with the kind's model, record the job, queue it. 202 with its id."""
    try:
        job, created = request.app.state.jobs.submit(
            body.kind, body.config, body.idempotency_key, principal.name, body.max_retries
        )
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False)
        raise RequestValidationError(
            [{**e, "loc": ("body", "config", *e["loc"])} for e in errors], body=body.config
        ) from None
    return JobAccepted(id=job.id, state=job.state.value, created=created)


@router.get("/v1/jobs", response_model=JobList, responses=_ERRORS)
def get_jobs(
    kind: JobKind | None = None,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> JobList:
    """Jobs, newest first, filtered by kind and state."""
    items, total = list_jobs(kind.value if kind else None, state, limit, offset)
    return JobList(items=items, total=total, limit=limit, offset=offset)


@router.get("/v1/jobs/{job_id}", response_model=JobInfo, responses={**_ERRORS, **_NOT_FOUND})
def get_one_job(job_id: str) -> JobInfo:
    return get_job(checked_job_id(job_id))


@router.post(
    "/v1/jobs/{job_id}/cancel",
    response_model=JobInfo,
    responses={**_ERRORS, **_NOT_FOUND, 409: {"model": Problem, "description": "the job already finished"}},
)
def cancel_job(job_id: str, principal: CurrentPrincipal, request: Request) -> JobInfo:
    """A queued job is cancelled at once; a running one is asked to stop and ends ``cancelled``."""
    return request.app.state.jobs.cancel(checked_job_id(job_id), principal)


@router.get("/v1/jobs/{job_id}/events", responses={**_ERRORS, **_NOT_FOUND, **_SSE})
async def job_events_stream(
    job_id: str,
    request: Request,
    after: Annotated[
        int | None, Query(ge=0, le=_MAX_SEQ, description="send events numbered above this")
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> EventSourceResponse:
    """The job's events as server-sent events (``state``, ``progress``, ``metrics``, ``result``, …),
    then ``end`` once it finished. Reconnecting with ``Last-Event-ID`` resumes after that event."""
    job_id = checked_job_id(job_id)
    start = after or 0
    if last_event_id is not None:
        if not last_event_id.isdigit() or int(last_event_id) > _MAX_SEQ:
            raise RequestValidationError(
                [
                    {
                        "loc": ("header", "last-event-id"),
                        "msg": "must be an event number",
                        "type": "int_parsing",
                    }
                ]
            )
        start = max(start, int(last_event_id))
    get_job(job_id)  # 404 before the stream starts
    settings = request.app.state.settings
    return EventSourceResponse(job_event_stream(job_id, start, settings.sse_poll_s), ping=settings.sse_ping_s)


@router.get("/v1/events", responses={**_ERRORS, **_SSE})
async def jobs_stream(request: Request) -> EventSourceResponse:
    """A ``job`` event with the job's current state each time any job changes (never ends)."""
    settings = request.app.state.settings
    return EventSourceResponse(jobs_snapshot_stream(settings.sse_poll_s), ping=settings.sse_ping_s)


@router.get("/v1/jobs/{job_id}/metrics", response_model=MetricsSeries, responses={**_ERRORS, **_NOT_FOUND})
def job_metrics(
    job_id: str,
    after: Annotated[int, Query(ge=0, le=_MAX_SEQ, description="last_event of a previous call")] = 0,
) -> MetricsSeries:
    """Training step metrics (one object per step, slash-named keys), from the job's metrics events.

    A step recomputed after a retry resumed from a checkpoint appears once, with its latest values."""
    steps, last, rewound = metrics_steps(checked_job_id(job_id), after)
    return MetricsSeries(job_id=job_id, steps=steps, last_event=last, rewind_after_step=rewound)


@router.get("/v1/jobs/{job_id}/results", response_model=ResultList, responses={**_ERRORS, **_NOT_FOUND})
def job_results(job_id: str) -> ResultList:
    """Evaluation summaries (overall and breakdowns per benchmark), from the job's result events: the
    latest per benchmark (a retried eval reports a benchmark again)."""
    return ResultList(job_id=job_id, results=results(checked_job_id(job_id)))


StepParam = Annotated[int, Path(ge=0, le=_MAX_STEP, description="a training step")]


@router.get("/v1/jobs/{job_id}/rollouts", response_model=RolloutSteps, responses={**_ERRORS, **_NO_ROLLOUTS})
def rollout_steps(job_id: str) -> RolloutSteps:
    """The steps whose rollouts a train job logged (``trainer.rollout_log``), ascending; none yet: []."""
    job = get_job(checked_job_id(job_id))
    return RolloutSteps(job_id=job.id, steps=logged_steps(run_folder(job)))


@router.get(
    "/v1/jobs/{job_id}/rollouts/{step}",
    response_model=RolloutStep,
    responses={**_ERRORS, **_NO_ROLLOUTS, **_BAD_LOG},
)
def rollout_step(job_id: str, step: StepParam) -> RolloutStep:
    """Every group logged at ``step``: its clips, prompt and answer, each response with its reward and
    advantage. 422 names the file, line and field of a line that does not fit."""
    job = get_job(checked_job_id(job_id))
    return RolloutStep(job_id=job.id, step=step, groups=read_step(job, step))


@router.get(
    "/v1/jobs/{job_id}/rollouts/{step}/frames/{key}/{index}",
    response_class=Response,
    responses={
        200: {"content": {"image/jpeg": {}}, "description": "the frame, downscaled"},
        **_ERRORS, **_NO_ROLLOUTS, **_BAD_LOG,
        503: {"model": Problem, "description": "this installation cannot draw thumbnails"},
    },
)  # fmt: skip
def rollout_frame(
    job_id: str,
    step: StepParam,
    key: Annotated[str, Path(pattern=CLIP_KEY_PATTERN, description="a clip key in the step's log")],
    index: Annotated[int, Path(ge=0, le=100_000, description="the frame's index in the clip")],
    request: Request,
    size: Annotated[int, Query(ge=MIN_SIZE, le=MAX_SIZE, description="longest side, pixels")] = DEFAULT_SIZE,
) -> Response:
    """A frame of a clip the step's log names, as a JPEG thumbnail (cached on the server and, being
    content-addressed, in the browser). A key the log does not name is 404: no other store entry."""
    job = get_job(checked_job_id(job_id))
    frames = logged_clips(job, step).get(key)
    if frames is None:
        raise RolloutLogMissing(f"job {job.id} logged no clip {key} at step {step}")
    if index >= frames:
        raise RolloutLogMissing(f"clip {key} has {frames} frames in the log of step {step}: no frame {index}")
    jpeg = request.app.state.thumbnails.get(frame_store(), key, index, size)
    return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": CACHE_CONTROL})


class KindInfo(BaseModel):
    kind: JobKind
    available: bool
    reason: str | None
    task: str
    queue: str
    config_schema: dict[str, Any] | None


@router.get("/v1/kinds", response_model=list[KindInfo], responses=_ERRORS)
def job_kinds() -> list[KindInfo]:
    """Every job kind, whether this installation can run it, and its config's JSON schema."""
    out = []
    for kind, spec in KINDS.items():
        try:
            schema, reason = spec.load_model().model_json_schema(), None
        except KindUnavailable as exc:
            schema, reason = None, str(exc)
        out.append(
            KindInfo(kind=kind, available=schema is not None, reason=reason, task=spec.task, queue=spec.queue,
                     config_schema=schema)
        )  # fmt: skip
    return out


@router.get("/v1/cache/stats", response_model=CacheStatsOut, responses=_ERRORS)
def frame_cache_stats() -> CacheStatsOut:
    """Frame store entries, bytes, hit ratio and recent failures."""
    return cache_stats()


@router.get("/healthz", response_model=Health, responses={503: {"model": Problem}})
def healthz() -> Health | JSONResponse:
    """Alive, and the database answers."""
    try:
        with session_scope() as session:
            session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return JSONResponse({"detail": f"database unreachable: {exc.__class__.__name__}"}, status_code=503)
    return Health(status="ok")


@router.get("/metrics", response_class=Response, responses=_ERRORS)
def prometheus(request: Request) -> Response:
    body, content_type = request.app.state.metrics.render()
    return Response(body, media_type=content_type)
