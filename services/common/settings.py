"""Process-wide settings, read from ``REELRL_*`` environment variables.

With no variables set everything is embedded under ``REELRL_HOME`` (default ``~/.reelrl``): a SQLite
database, a local frame root, and a filesystem Celery broker, so ``reelrl`` runs with no server.
Production points ``REELRL_DATABASE_URL`` at Postgres and ``REELRL_BROKER_URL`` at Redis.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REELRL_", extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".reelrl")
    database_url: str | None = None
    broker_url: str | None = None
    frame_root: Path | None = None
    # Input video paths must resolve inside one of these roots (empty: no restriction).
    data_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # Folders whose Python files a job submitted over the API may load as reward functions (empty: none).
    plugin_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # The LLM judge endpoints (base URLs) a job submitted over the API may send answers to, and the
    # environment variables whose tokens it may send them (empty: none): a job must not make the
    # worker call any URL, nor send it any secret the worker holds.
    judge_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    judge_key_envs: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Decoders in the order they are tried (see services.common.frames.decoders).
    decoders: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["decord", "pyav"])
    # Threads per decode; workers scale by processes, one decode thread each, which measured best.
    decode_threads: int = Field(default=1, ge=0)

    # Celery: the longest task (one clip decode) is bounded by these; the broker's visibility
    # timeout must exceed the hard limit so a slow task is never redelivered while still running.
    task_soft_time_limit_s: int = 600
    task_time_limit_s: int = 660
    broker_visibility_timeout_s: int = 900
    # A decode that has not finished by then is recorded as failed (decoders can hang on bad files).
    decode_timeout_s: float = 300.0
    # A claimed clip whose worker stops renewing its lease for this long is taken over by another.
    clip_lease_s: float = 30.0
    clip_max_attempts: int = 3

    @field_validator("data_roots", "plugin_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p) for p in value.split(":") if p]
        return value

    @field_validator("judge_urls", "judge_key_envs", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip().rstrip("/") for v in value.split(",") if v.strip()]
        return value

    @field_validator("decoders", mode="before")
    @classmethod
    def _split_decoders(cls, value: object) -> object:
        if isinstance(value, str):
            return [d.strip() for d in value.split(",") if d.strip()]
        return value

    @model_validator(mode="after")
    def _check_limits(self) -> Settings:
        if self.task_time_limit_s <= self.task_soft_time_limit_s:
            raise ValueError("REELRL_TASK_TIME_LIMIT_S must exceed REELRL_TASK_SOFT_TIME_LIMIT_S")
        if self.broker_visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError(
                "REELRL_BROKER_VISIBILITY_TIMEOUT_S must exceed REELRL_TASK_TIME_LIMIT_S, "
                "otherwise Redis redelivers tasks that are still running"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'reelrl.db'}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or "filesystem://localhost//"

    @property
    def resolved_frame_root(self) -> Path:
        return self.frame_root or self.home / "frames"

    @property
    def broker_folder(self) -> Path:
        """Message folder of the embedded filesystem broker."""
        return self.home / "broker"

    @property
    def is_embedded_broker(self) -> bool:
        return self.resolved_broker_url.startswith("filesystem://")

    # Prometheus exporter of queue workers and the trainer (services.common.observability); unset: none.
    # Loopback by default: containers and pods set 0.0.0.0 so the scraper can reach it.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings_cache() -> None:
    """Forget cached settings (tests and CLIs that change ``REELRL_*`` at runtime)."""
    get_settings.cache_clear()
