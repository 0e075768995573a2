"""A small HTTP client of the jobs API (what ``reelrl submit`` and ``reelrl status`` use)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


class ApiError(RuntimeError):
    def __init__(self, status: int, detail: Any) -> None:
        self.status, self.detail = status, detail
        super().__init__(f"HTTP {status}: {format_detail(detail)}")


def format_detail(detail: Any) -> str:
    """FastAPI's error details as lines a person reads: ``config.dataset: …``."""
    if isinstance(detail, list):
        lines = []
        for err in detail:
            if isinstance(err, dict):
                loc = ".".join(str(p) for p in err.get("loc", []) if p != "body")
                lines.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
            else:
                lines.append(str(err))
        return "; ".join(lines)
    return str(detail)


@dataclass
class ServerEvent:
    id: str | None
    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


def parse_sse(lines: Iterator[str]) -> Iterator[ServerEvent]:
    """Server-sent events from a stream of lines (the text/event-stream format)."""
    event_id, event, data = None, "message", []
    for line in lines:
        if line == "":
            if data:
                yield ServerEvent(event_id, event, "\n".join(data))
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            event_id = value


class ApiClient:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("REELRL_API_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("REELRL_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(
                0, f"cannot reach the API at {self.url} ({exc}); is `reelrl serve api` running?"
            ) from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ApiError(response.status_code, detail)
        return response.json()

    def submit(
        self,
        kind: str,
        config: dict[str, Any],
        idempotency_key: str | None = None,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": kind, "config": config}
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        if max_retries is not None:
            body["max_retries"] = max_retries
        return self._call("POST", "/v1/jobs", json=body)

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def jobs(
        self, kind: str | None = None, state: str | None = None, limit: int = 50, offset: int = 0
    ) -> dict[str, Any]:
        given = {"kind": kind, "state": state, "limit": limit, "offset": offset or None}
        params = {k: v for k, v in given.items() if v is not None}
        return self._call("GET", "/v1/jobs", params=params)

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/jobs/{job_id}/cancel")

    def events(self, job_id: str, after: int = 0, retry_s: float = 1.0) -> Iterator[ServerEvent]:
        """The job's events until it ends; a dropped connection resumes after the last event seen."""
        last = after
        while True:
            try:
                with self.http.stream(
                    "GET",
                    f"/v1/jobs/{job_id}/events",
                    params={"after": last},
                    timeout=httpx.Timeout(30, read=None),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise ApiError(response.status_code, response.json().get("detail"))
                    for event in parse_sse(response.iter_lines()):
                        if event.id is not None:
                            last = int(event.id)
                        yield event
                        if event.event == "end":
                            return
            except httpx.TransportError:
                time.sleep(retry_s)  # the API restarted: nothing is lost, resume
