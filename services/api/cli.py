"""Console front-ends of ``reelrl serve api``, ``submit``, ``status`` and ``token``.

Everything printed that comes from a job, a token, a file or the API goes through
:func:`services.common.text.plain` (Rich markup escaped, bidi controls visible): a job named ``[/x]``
must not crash ``reelrl status`` for everyone.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.api.client import ApiClient, ApiError, format_detail
from services.common.json_lines import RecordError, check_text
from services.common.text import plain, visible

console = Console(stderr=True)
out = Console()


def serve_api(host: str | None, port: int | None) -> int:
    import os

    import uvicorn

    from services.api.server import StoppableServer
    from services.api.settings import ApiSettings, is_loopback

    # The app reads its settings from the environment: a flag given wins over REELRL_API_HOST/PORT.
    if host is not None:
        os.environ["REELRL_API_HOST"] = host
    if port is not None:
        os.environ["REELRL_API_PORT"] = str(port)
    try:
        settings = ApiSettings()
    except ValueError as exc:
        console.print(f"[red]invalid REELRL_API_* settings[/red]: {plain(exc)}")
        return 2
    if settings.auth_required:
        mode = "tokens required"
    elif is_loopback(settings.host):
        mode = "OPEN: no token needed (loopback only)"
    else:
        mode = (
            f"[bold red]OPEN: no token needed, and NOT loopback-only: anyone who reaches {plain(settings.host)} "
            "may submit and cancel jobs[/bold red] (REELRL_API_AUTH=open)"
        )
    console.print(
        f"ReelRL jobs API on http://{plain(settings.host)}:{settings.port} (status page at /) — auth: {mode}"
    )
    server = StoppableServer(uvicorn.Config(
        "services.api.app:create_app", factory=True, host=settings.host, port=settings.port,
        log_level="info", timeout_graceful_shutdown=5,
    ))  # fmt: skip
    server.run()
    # stopping the API is its normal end: 0 after SIGTERM (a scheduler, `kill`), 130 after Ctrl-C
    return 130 if signal.SIGINT in server.stopped_by else 0


def load_job_config(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """A YAML/JSON file with ``a.b=value`` overrides on top (the same syntax as ``reelrl train``).

    Raises ``ValueError`` naming the file, line and reason for a file that is not a mapping."""
    from services.common.config_files import merge_overrides, read_yaml_mapping

    base = read_yaml_mapping(path) if path is not None else {}
    data = merge_overrides(base, overrides, "video_params.fps=4")  # non-finite numbers: the API's 422 too
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a job config is a mapping")
    check_text(data)  # a lone surrogate could not even be sent
    return data


def submit_command(
    kind: str,
    config: Path | None,
    overrides: list[str],
    key: str | None,
    follow: bool,
    max_retries: int | None = None,
    attempts: int = 4,
    api: ApiClient | None = None,
) -> int:
    """Submit with an idempotency key (``key``, or a new one) and send it again while the API cannot
    be reached or answers 503: a request that timed out may have created the job, and the same key
    names that job instead of a second one."""
    import time
    import uuid

    try:
        body = load_job_config(config, overrides)
    except (ValueError, OSError) as exc:
        console.print(f"[red]{plain(exc)}[/red]", soft_wrap=True)
        return 2
    try:
        check_text(key)  # undecodable command-line bytes arrive as lone surrogates
    except RecordError:
        console.print(f"[red]--key {key!a} is not UTF-8 text[/red]")
        return 2
    key = key or f"reelrl-submit-{uuid.uuid4().hex}"
    with api or ApiClient() as api:
        for attempt in range(1, attempts + 1):
            try:
                accepted = api.submit(kind, body, key, max_retries)
                break
            except ApiError as exc:
                if exc.status not in (0, 503) or attempt == attempts:
                    console.print(
                        f"[red]refused (HTTP {exc.status})[/red]: {plain(format_detail(exc.detail))}"
                    )
                    if exc.status in (0, 503):
                        console.print(
                            f"the job may exist: resubmit with --key {plain(key)} to get it, not a copy"
                        )
                    return 1
                wait = 2 ** (attempt - 1)
                console.print(
                    f"[yellow]no answer (HTTP {exc.status}): {plain(format_detail(exc.detail))}[/yellow]; "
                    f"sending it again in {wait} s with idempotency key {plain(key)}"
                )
                time.sleep(wait)
        if accepted["state"] == "failed":
            # A resend after the 503 of a broker outage names the job that outage failed: not a success.
            reason = api.job(accepted["id"]).get("reason") or "no reason recorded"
            console.print(
                f"[red]{plain(kind)} job {plain(accepted['id'])} failed[/red]: {plain(reason)}; submit "
                "again (without --key) once the cause is fixed"
            )
            return 1
        note = "" if accepted["created"] else " (existing job for this idempotency key)"
        console.print(f"{plain(kind)} job {plain(accepted['id'])} {plain(accepted['state'])}{note}")
        out.print(plain(accepted["id"]))
        if not follow:
            return 0
        try:
            return follow_job(api, accepted["id"])
        except ApiError as exc:
            if exc.status != 403:
                raise
            console.print(
                f"[red]cannot follow it (HTTP 403)[/red]: following needs a token with the read scope, and "
                f"this one lacks it; the job was submitted: `reelrl status {plain(accepted['id'])}` with a "
                "read token shows it"
            )
            return 1


def status_command(
    job_id: str | None,
    follow: bool,
    kind: str | None,
    state: str | None,
    as_json: bool,
    limit: int = 50,
    offset: int = 0,
) -> int:
    with ApiClient() as api:
        try:
            if job_id is None:
                listing = api.jobs(kind=kind, state=state, limit=limit, offset=offset)
                if as_json:
                    out.print_json(json.dumps(listing), ensure_ascii=True)
                else:
                    _print_jobs(listing)
                return 0
            job = api.job(job_id)
            if as_json:
                out.print_json(json.dumps(job), ensure_ascii=True)
            else:
                _print_job(job)
            return follow_job(api, job_id) if follow else _exit_code(job["state"])
        except ApiError as exc:
            console.print(f"[red]HTTP {exc.status}[/red]: {plain(format_detail(exc.detail))}")
            return 1


def _exit_code(state: str) -> int:
    return {"failed": 1, "cancelled": 3}.get(state, 0)


def _print_jobs(listing: dict[str, Any]) -> None:
    from rich import box

    items = listing["items"]
    first = listing.get("offset", 0) + 1
    shown = f"{first}–{first + len(items) - 1} of {listing['total']}" if items else str(listing["total"])
    table = Table(title=f"jobs ({shown})", box=box.SIMPLE_HEAD)
    # Ids, kinds and states are never cut: the message folds, and the date is left out below 110
    # columns (`status ID` and --json have it).
    table.add_column("id", no_wrap=True, min_width=32)
    table.add_column("kind", no_wrap=True, min_width=10)
    table.add_column("state", no_wrap=True, min_width=9)
    table.add_column("progress", no_wrap=True)
    table.add_column("message", ratio=1, overflow="fold")
    dated = out.width >= 110
    if dated:
        table.add_column("created", no_wrap=True)
    for job in items:
        p = job["progress"]
        progress = f"{p['done']}/{p['total']}" if p["total"] is not None else str(p["done"])
        row = [plain(job["id"]), plain(job["kind"]), plain(job["state"]), progress,
               plain(job["reason"] or p["message"])]  # fmt: skip
        table.add_row(*row, *([plain(job["created_at"][:19].replace("T", " "))] if dated else []))
    out.print(table)


def _print_job(job: dict[str, Any]) -> None:
    p = job["progress"]
    total = "?" if p["total"] is None else p["total"]
    out.print(
        f"[bold]{plain(job['kind'])} job {plain(job['id'])}[/bold]: {plain(job['state'])}  "
        f"{p['done']}/{total} {plain(p['message'])}"
    )
    out.print(f"created {plain(job['created_at'][:19].replace('T', ' '))}")
    if job["reason"]:
        out.print(f"reason: {plain(job['reason'])}")
    if job["result"]:
        out.print_json(json.dumps(_shown(job["result"])))


def _shown(value: Any) -> Any:
    """A JSON value with every string's bidi controls written as ``<U+202E>`` (the human view; --json
    keeps the text, escaped as ``\\u202e``)."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible(str(k)): _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def follow_job(api: ApiClient, job_id: str) -> int:
    """A progress bar driven by the job's event stream, until the job ends; exit code by final state."""
    state = "queued"
    with Progress(
        TextColumn("[bold]{task.fields[state]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
    ) as bar:  # fmt: skip
        task = bar.add_task("", total=None, state=plain(state))
        for event in api.events(job_id):
            if event.event == "end":
                break
            data = event.json()["data"]
            if event.event == "progress":
                bar.update(
                    task, completed=data["done"], total=data["total"], description=plain(data["message"])
                )
            elif event.event == "state":
                state = data["state"]
                bar.update(task, state=plain(state))
                if state == "queued" and data.get("reason"):
                    console.print(f"[yellow]retrying[/yellow]: {plain(data['reason'])}")
            elif event.event == "metrics":
                shown = {k: v for k, v in data.items() if k in ("step", "reward/overall", "reward/accuracy")}
                bar.update(
                    task,
                    description=plain(
                        " ".join(f"{k}={v:.4g}" for k, v in shown.items() if isinstance(v, int | float))
                    ),
                )
    job = api.job(job_id)
    _print_job(job)
    return _exit_code(job["state"])


def token_create(name: str | None, scopes: str) -> int:
    import secrets

    from services.api.tokens import TokenError, create_token, parse_scopes

    name = name or f"token-{secrets.token_hex(3)}"
    try:
        token = create_token(name, parse_scopes(scopes))
    except TokenError as exc:
        console.print(f"[red]{plain(exc)}[/red]")
        return 2
    console.print(f"token {plain(repr(name))} ({plain(scopes)}); shown once, only its hash is stored:")
    print(token, file=sys.stdout)
    return 0


def token_revoke(name: str) -> int:
    from services.api.tokens import TokenError, revoke_token

    try:
        revoke_token(name)
    except TokenError as exc:
        console.print(f"[red]{plain(exc)}[/red]")
        return 1
    console.print(f"revoked {plain(repr(name))}")
    return 0


def token_list() -> int:
    from services.api.tokens import list_tokens

    table = Table(title="API tokens")
    for column in ("name", "scopes", "created", "revoked"):
        table.add_column(column)
    for t in list_tokens():
        table.add_row(plain(t.name), plain(",".join(t.scopes)), f"{t.created_at:%Y-%m-%d %H:%M}",
                      f"{t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "")  # fmt: skip
    out.print(table)
    return 0
