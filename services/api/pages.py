"""The status page: server-rendered HTML (Jinja2) with a little JavaScript served from the package.

Pages: jobs (live over SSE), one job (progress; training curves; eval tables), a train job's logged
rollouts (frames, prompts, responses by reward), frame cache, login.
The browser authenticates with a cookie holding the token (set by ``/login``, HttpOnly, SameSite).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

import anyio
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from services.api.auth import COOKIE, AuthFailed, Principal, csrf_token, current_principal
from services.api.charts import panels_json
from services.api.eval_tables import eval_tables
from services.api.kinds import JobKind
from services.api.service import RESULT_EVENT, cache_stats, checked_job_id, results
from services.api.thumbnails import DEFAULT_SIZE
from services.api.tokens import Scope, authenticate
from services.common.db.models import JobState
from services.common.jobs import METRICS_EVENT, JobInfo, get_job, list_jobs, recent_events
from services.common.text import visible

_HERE = Path(__file__).parent
router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=_HERE / "templates")
# Scripts and styles come only from /static: no inline code, no third-party origin.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_RECENT_EVENTS = 30
JOBS_PAGE = 100


def _finalize(value: Any) -> Any:
    # Every {{ … }} of every template goes through here (before escaping): text is shown with its bidi
    # controls visible. Markup (JSON for the scripts) is left alone; the scripts do the same.
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def event_view(data: dict[str, Any]) -> tuple[str, str | None]:
    """An event's data as the log shows it: JSON (unescaped text) and its traceback as lines apart."""
    shown = {k: v for k, v in data.items() if k != "traceback"}
    trace = data.get("traceback")
    return json.dumps(shown, ensure_ascii=False), trace if isinstance(trace, str) else None


def _bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


templates.env.filters.update(bytes=_bytes, when=_when, number=_number, event_view=event_view)
templates.env.finalize = _finalize


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    settings = request.app.state.settings
    context = {"principal": current_principal(request), "auth_required": settings.auth_required, **context}
    response = templates.TemplateResponse(request, name, context, status_code=status)
    response.headers["Content-Security-Policy"] = CSP
    return response


def auth_page(request: Request, failure: AuthFailed) -> HTMLResponse:
    return render(
        request, "login.html", {"message": failure.detail, "next": request.url.path}, failure.status
    )


def not_found_page(request: Request, message: str) -> HTMLResponse:
    return render(request, "not_found.html", {"message": message}, 404)


def _page_link(kind: JobKind | None, state: JobState | None, limit: int, offset: int) -> str:
    query = {"kind": kind.value if kind else None, "state": state.value if state else None,
             "limit": limit if limit != JOBS_PAGE else None, "offset": offset or None}  # fmt: skip
    return "/?" + urlencode({k: v for k, v in query.items() if v is not None})


@router.get("/", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    kind: JobKind | None = None,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = JOBS_PAGE,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> HTMLResponse:
    items, total = list_jobs(kind.value if kind else None, state, limit=limit, offset=offset)
    page = {
        "kind": kind.value if kind else None, "state": state.value if state else None,
        "cancel": _list_cancel_data(request), "total": total, "offset": offset, "limit": limit,
    }  # fmt: skip
    principal = current_principal(request)
    newer = _page_link(kind, state, limit, max(0, offset - limit)) if offset > 0 else None
    older = _page_link(kind, state, limit, offset + limit) if offset + limit < total else None
    return render(
        request,
        "jobs.html",
        {"jobs": items, "total": total, "kind": kind, "state": state, "kinds": list(JobKind),
         "states": list(JobState), "page_data": page, "offset": offset, "newer": newer, "older": older,
         "cancellable": {job.id for job in items if may_cancel(principal, job)}},
    )  # fmt: skip


def may_cancel(principal: Principal, job: JobInfo) -> bool:
    """Whether ``POST /v1/jobs/{id}/cancel`` would let this visitor cancel ``job`` (the same rule)."""
    if job.state.terminal or not principal.allows(Scope.submit):
        return False
    return principal.name is None or principal.allows(Scope.admin) or job.owner == principal.name


def _csrf(request: Request) -> str | None:
    token = request.cookies.get(COOKIE)
    return csrf_token(token) if token else None


def _cancel_data(request: Request, job: JobInfo) -> dict[str, Any] | None:
    """What the page's cancel button sends: the CSRF header for the visitor's cookie, if any."""
    if not may_cancel(current_principal(request), job):
        return None
    return {"csrf": _csrf(request)}


def _list_cancel_data(request: Request) -> dict[str, Any] | None:
    """For the jobs list, whose rows arrive live: which jobs the visitor may cancel (:func:`may_cancel`
    as data: any job, or those owned by ``owner``) and the CSRF header; None when none."""
    principal = current_principal(request)
    if not principal.allows(Scope.submit):
        return None
    anyone = principal.name is None or principal.allows(Scope.admin)
    return {"csrf": _csrf(request), "any": anyone, "owner": principal.name}


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str) -> HTMLResponse:
    job = get_job(checked_job_id(job_id))
    # Steps and results have their own views; the log shows the rest.
    recent = recent_events(job.id, _RECENT_EVENTS, exclude_types=(METRICS_EVENT, RESULT_EVENT))
    context: dict[str, Any] = {"job": job, "recent": recent, "config_json": json.dumps(job.config, indent=2)}
    if job.result is not None:
        context["result_json"] = json.dumps(job.result, indent=2)
    if job.kind == JobKind.eval:
        context["tables"] = eval_tables(results(job.id))
    cancel = _cancel_data(request, job)
    page = {
        "job_id": job.id, "kind": job.kind, "state": job.state.value, "last_event": job.last_event,
        "panels": panels_json() if job.kind == JobKind.train else [], "cancel": cancel,
    }  # fmt: skip
    context["page_data"] = page
    context["can_cancel"] = cancel is not None
    return render(request, "job.html", context)


@router.get("/jobs/{job_id}/rollouts", response_class=HTMLResponse)
def rollouts_page(
    request: Request, job_id: str, step: Annotated[int | None, Query(ge=0, le=10**9)] = None
) -> HTMLResponse:
    """The Rollouts view: the script reads the steps and groups from ``/v1/jobs/{id}/rollouts``."""
    job = get_job(checked_job_id(job_id))
    if job.kind != JobKind.train:
        return not_found_page(request, f"job {job.id} is a {job.kind} job: only train jobs log rollouts")
    page = {"job_id": job.id, "state": job.state.value, "step": step, "thumb_size": DEFAULT_SIZE}
    return render(request, "rollouts.html", {"job": job, "page_data": page})


@router.get("/jobs/{job_id}/results.html", response_class=HTMLResponse)
def eval_results_fragment(request: Request, job_id: str) -> HTMLResponse:
    tables = eval_tables(results(checked_job_id(job_id)))
    return render(request, "results_table.html", {"tables": tables})


@router.get("/cache", response_class=HTMLResponse)
def cache_page(request: Request) -> HTMLResponse:
    return render(request, "cache.html", {"stats": cache_stats()})


def _local_path(target: str | None) -> str:
    # Only paths on this site: never an open redirect.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return render(request, "login.html", {"message": None, "next": _local_path(next)})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = _local_path((form.get("next") or ["/"])[0])
    info = await anyio.to_thread.run_sync(authenticate, token) if token else None
    if info is None:
        return render(request, "login.html", {"message": "invalid or revoked token", "next": target}, 401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
    )
    return response


@router.get("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
