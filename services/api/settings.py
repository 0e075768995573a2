"""Settings of the jobs API and status page, from ``REELRL_API_*`` environment variables."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.api.kinds import KINDS, JobKind
from services.common.jobs import MAX_RETRIES_LIMIT


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REELRL_API_", extra="ignore")

    host: str = Field("127.0.0.1", description="interface to bind")
    port: int = Field(8000, ge=0, le=65535)
    # None: open only when bound to a loopback interface, required otherwise.
    auth: Literal["required", "open"] | None = Field(None, description="require bearer tokens or not")
    max_body_bytes: int = Field(1024 * 1024, gt=0, description="larger request bodies get 413")
    sse_poll_s: float = Field(0.5, gt=0, description="how often an event stream looks for news")
    sse_ping_s: float = Field(15.0, gt=0, description="keep-alive comment interval of event streams")
    # None: every job heartbeat interval (REELRL_JOB_HEARTBEAT_S).
    reaper_interval_s: float | None = Field(None, gt=0)
    max_retries: dict[JobKind, Annotated[int, Field(ge=0, le=MAX_RETRIES_LIMIT)]] = Field(
        default_factory=dict,
        description="JSON {kind: n}: re-queues of a job whose worker died, over the kind's default",
    )
    # Prometheus scrapes /metrics without a token when true; otherwise it needs a token with the
    # `metrics` (or `read`) scope.
    metrics_public: bool = Field(False, description="serve /metrics without a token")
    # Comma-separated host names (a leading "*." matches subdomains) the API answers to besides the
    # loopback names and IP literals: the names clients and the proxy in front of it use.
    allowed_hosts: str = Field("", description="extra Host names accepted (DNS rebinding guard)")

    def default_max_retries(self, kind: JobKind) -> int:
        return self.max_retries.get(kind, KINDS[kind].max_retries)

    def host_names(self) -> list[str]:
        """Every Host name the API answers to (see :mod:`services.api.hosts`)."""
        names = ["localhost", "127.0.0.1", "::1"]
        if self.host not in ("0.0.0.0", "::", ""):
            names.append(self.host)
        return names + self.configured_hosts

    @property
    def configured_hosts(self) -> list[str]:
        return [n.strip().lower() for n in self.allowed_hosts.split(",") if n.strip()]

    @property
    def auth_required(self) -> bool:
        if self.auth is not None:
            return self.auth == "required"
        return not is_loopback(self.host)
