"""The jobs API and status page (FastAPI): ``uvicorn --factory services.api.app:create_app``.

REST under ``/v1`` (SPEC §7), server-sent events, Prometheus ``/metrics``, and the status page's
server-rendered HTML with its static assets (served from the package: no CDN). On start it migrates
the database and runs the reaper that fails jobs whose worker stopped heartbeating.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from services.api import pages
from services.api.auth import AuthFailed, AuthMiddleware
from services.api.db_down import DatabaseDownMiddleware
from services.api.hosts import HostGuardMiddleware
from services.api.json_body import BodyRejected
from services.api.kinds import KindUnavailable
from services.api.metrics_prom import ApiMetrics, MetricsMiddleware
from services.api.rollouts import RolloutLogInvalid, RolloutLogMissing
from services.api.routes import router
from services.api.service import BrokerUnavailable, JobService
from services.api.settings import ApiSettings
from services.api.thumbnails import FrameMissing, ThumbnailCache, ThumbnailsUnavailable
from services.common.body_limit import BodyLimitMiddleware
from services.common.db import ensure_schema
from services.common.jobs import JobConflict, JobNotFound, JobSettings

log = logging.getLogger(__name__)


async def _reap_forever(jobs: JobService, interval_s: float) -> None:
    while True:
        try:
            await anyio.to_thread.run_sync(jobs.reap)
        except SQLAlchemyError as exc:
            log.warning("reaper: database unavailable: %s", exc)
        except Exception:  # one bad pass must not end the reaper for the life of the process
            log.exception("reaper: pass failed (tried again in %g s)", interval_s)
        await anyio.sleep(interval_s)


def _wants_html(request: Request) -> bool:
    path = request.url.path
    return not (path.startswith("/v1/") or path in ("/metrics", "/healthz"))


def _auth_response(request: Request, failure: AuthFailed) -> Response:
    if _wants_html(request):
        return pages.auth_page(request, failure)
    headers = {"WWW-Authenticate": "Bearer"} if failure.status == 401 else None
    return JSONResponse({"detail": failure.detail}, status_code=failure.status, headers=headers)


def create_app(settings: ApiSettings | None = None, jobs: JobService | None = None) -> FastAPI:
    settings = settings or ApiSettings()
    job_settings = JobSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(ensure_schema)
        if not settings.auth_required:
            log.warning(
                "the jobs API is OPEN: requests without a token may submit and cancel jobs (bound to %s; "
                "set REELRL_API_AUTH=required to require tokens)",
                settings.host,
            )
        if settings.metrics_public:
            log.warning("/metrics is PUBLIC: served without a token (REELRL_API_METRICS_PUBLIC=true)")
        reaper = asyncio.create_task(
            _reap_forever(app.state.jobs, settings.reaper_interval_s or job_settings.heartbeat_s)
        )
        try:
            yield
        finally:
            reaper.cancel()

    app = FastAPI(
        title="ReelRL jobs API",
        version="1",
        description="Submit preprocess, train and eval jobs and watch them (SPEC §7).",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.jobs = jobs or JobService(settings=settings)
    app.state.metrics = ApiMetrics()
    app.state.thumbnails = ThumbnailCache()

    @app.exception_handler(JobNotFound)
    async def _not_found(request: Request, exc: JobNotFound) -> Response:
        if _wants_html(request):
            return pages.not_found_page(request, str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=404)

    def detail_answer(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def answer(request: Request, exc: Exception) -> Response:
            return JSONResponse({"detail": str(exc)}, status_code=status)

        return answer

    # errors whose message is the whole answer, by status
    for error, status in (
        (RolloutLogMissing, 404), (FrameMissing, 404), (RolloutLogInvalid, 422), (ThumbnailsUnavailable, 503),
        (JobConflict, 409),
    ):  # fmt: skip
        app.add_exception_handler(error, detail_answer(status))

    @app.exception_handler(KindUnavailable)
    async def _unavailable(request: Request, exc: KindUnavailable) -> Response:
        detail = [
            {
                "loc": ["body", "kind"],
                "msg": f"kind not available in this installation ({exc})",
                "type": "kind_unavailable",
            }
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(BrokerUnavailable)
    async def _broker(request: Request, exc: BrokerUnavailable) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(AuthFailed)
    async def _auth(request: Request, exc: AuthFailed) -> Response:
        return _auth_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own handler, minus pydantic's context objects (not always JSON-serialisable).
        errors = [{k: v for k, v in e.items() if k != "ctx"} for e in exc.errors()]
        return JSONResponse({"detail": _json_safe(jsonable_encoder(errors))}, status_code=422)

    @app.exception_handler(BodyRejected)
    async def _bad_body(request: Request, exc: BodyRejected) -> Response:
        return JSONResponse({"detail": exc.errors}, status_code=422)

    @app.exception_handler(405)
    async def _method_not_allowed(request: Request, exc: StarletteHTTPException) -> Response:
        # Starlette names the methods of the first route on the path only; Allow lists them all.
        allowed = sorted(
            {m for route in app.router.routes if route.matches(request.scope)[0] == Match.PARTIAL
             for m in getattr(route, "methods", None) or ()}
        )  # fmt: skip
        return JSONResponse(
            {"detail": exc.detail},
            status_code=405,
            headers={"Allow": ", ".join(allowed)} if allowed else None,
        )

    app.include_router(router)
    app.include_router(pages.router)
    pages.mount_static(app)
    # Outermost first: Host and Origin, size limit, then authentication, then metrics around the routes.
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(
        AuthMiddleware,
        required=settings.auth_required,
        on_failure=_auth_response,
        metrics_public=settings.metrics_public,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(DatabaseDownMiddleware)  # database errors of authentication and of the routes
    app.add_middleware(
        HostGuardMiddleware, host_names=settings.host_names(), configured=settings.configured_hosts
    )
    return app


def _json_safe(value: Any) -> Any:
    """Validation errors echo the input: a non-finite float there is written as text, not a 500."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
