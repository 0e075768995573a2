"""Console front-ends of ``reelrl serve api``, ``submit``, ``status`` and ``token``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.api.client import ApiClient, ApiError, format_detail

console = Console(stderr=True)
out = Console()


def serve_api(host: str, port: int) -> None:
    import os

    import uvicorn

    from services.api.settings import ApiSettings

    # The app reads its settings from the environment; the command line wins.
    os.environ["REELRL_API_HOST"], os.environ["REELRL_API_PORT"] = host, str(port)
    settings = ApiSettings()
    mode = "tokens required" if settings.auth_required else "OPEN: no token needed (loopback only)"
    console.print(f"ReelRL jobs API on http://{host}:{port} (status page at /) — auth: {mode}")
    uvicorn.run(
        "services.api.app:create_app", factory=True, host=host, port=port, log_level="info",
        timeout_graceful_shutdown=5,
    )  # fmt: skip


def load_job_config(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """A YAML/JSON file with ``a.b=value`` overrides on top (the same syntax as ``reelrl train``)."""
    from omegaconf import OmegaConf

    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value (e.g. video_params.fps=4)")
    base = OmegaConf.load(path) if path is not None else OmegaConf.create({})
    merged = OmegaConf.merge(base, OmegaConf.from_dotlist(overrides))
    data = OmegaConf.to_container(merged, resolve=True)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a job config is a mapping")
    return data


def submit_command(
    kind: str,
    config: Path | None,
    overrides: list[str],
    key: str | None,
    follow: bool,
    max_retries: int | None = None,
) -> int:
    try:
        body = load_job_config(config, overrides)
    except (ValueError, OSError) as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    with ApiClient() as api:
        try:
            accepted = api.submit(kind, body, key, max_retries)
        except ApiError as exc:
            console.print(f"[red]refused (HTTP {exc.status})[/red]: {format_detail(exc.detail)}")
            return 1
        note = "" if accepted["created"] else " (existing job for this idempotency key)"
        console.print(f"{kind} job {accepted['id']} {accepted['state']}{note}")
        out.print(accepted["id"])
        return follow_job(api, accepted["id"]) if follow else 0


def status_command(
    job_id: str | None, follow: bool, kind: str | None, state: str | None, as_json: bool
) -> int:
    with ApiClient() as api:
        try:
            if job_id is None:
                listing = api.jobs(kind=kind, state=state)
                if as_json:
                    out.print_json(json.dumps(listing))
                else:
                    _print_jobs(listing)
                return 0
            job = api.job(job_id)
            if as_json:
                out.print_json(json.dumps(job))
            else:
                _print_job(job)
            return follow_job(api, job_id) if follow else _exit_code(job["state"])
        except ApiError as exc:
            console.print(f"[red]HTTP {exc.status}[/red]: {format_detail(exc.detail)}")
            return 1


def _exit_code(state: str) -> int:
    return {"failed": 1, "cancelled": 3}.get(state, 0)


def _print_jobs(listing: dict[str, Any]) -> None:
    table = Table(title=f"jobs ({listing['total']})")
    table.add_column("id", no_wrap=True, min_width=32)
    for column in ("kind", "state", "progress", "message", "created"):
        table.add_column(column)
    for job in listing["items"]:
        p = job["progress"]
        progress = f"{p['done']}/{p['total']}" if p["total"] is not None else str(p["done"])
        table.add_row(
            job["id"],
            job["kind"],
            job["state"],
            progress,
            job["reason"] or p["message"],
            job["created_at"][:19],
        )
    out.print(table)


def _print_job(job: dict[str, Any]) -> None:
    p = job["progress"]
    total = "?" if p["total"] is None else p["total"]
    out.print(
        f"[bold]{job['kind']} job {job['id']}[/bold]: {job['state']}  {p['done']}/{total} {p['message']}"
    )
    if job["reason"]:
        out.print(f"reason: {job['reason']}")
    if job["result"]:
        out.print_json(json.dumps(job["result"]))


def follow_job(api: ApiClient, job_id: str) -> int:
    """A progress bar driven by the job's event stream, until the job ends; exit code by final state."""
    state = "queued"
    with Progress(
        TextColumn("[bold]{task.fields[state]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
    ) as bar:  # fmt: skip
        task = bar.add_task("", total=None, state=state)
        for event in api.events(job_id):
            if event.event == "end":
                break
            data = event.json()["data"]
            if event.event == "progress":
                bar.update(task, completed=data["done"], total=data["total"], description=data["message"])
            elif event.event == "state":
                state = data["state"]
                bar.update(task, state=state)
                if state == "queued" and data.get("reason"):
                    console.print(f"[yellow]retrying[/yellow]: {data['reason']}")
            elif event.event == "metrics":
                shown = {k: v for k, v in data.items() if k in ("step", "reward/overall", "reward/accuracy")}
                bar.update(
                    task, description=" ".join(f"{k}={v:.4g}" for k, v in shown.items() if v is not None)
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
        console.print(f"[red]{exc}[/red]")
        return 2
    console.print(f"token {name!r} ({scopes}); shown once, only its hash is stored:")
    print(token, file=sys.stdout)
    return 0


def token_revoke(name: str) -> int:
    from services.api.tokens import TokenError, revoke_token

    try:
        revoke_token(name)
    except TokenError as exc:
        console.print(f"[red]{exc}[/red]")
        return 1
    console.print(f"revoked {name!r}")
    return 0


def token_list() -> int:
    from services.api.tokens import list_tokens

    table = Table(title="API tokens")
    for column in ("name", "scopes", "created", "revoked"):
        table.add_column(column)
    for t in list_tokens():
        table.add_row(t.name, ",".join(t.scopes), f"{t.created_at:%Y-%m-%d %H:%M}",
                      f"{t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "")  # fmt: skip
    out.print(table)
    return 0
