"""Settings of the reward HTTP service, from ``REELRL_REWARD_*`` environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from services.reward.config import RewardConfig, default_math_workers


class RewardServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REELRL_REWARD_", extra="ignore")

    max_batch_items: int = Field(1024, gt=0, description="items per request; more → 413")
    # Protects the service; the scoring limit (ScoringOptions.max_response_chars) is separate and lower.
    max_response_chars: int = Field(1_000_000, gt=0, description="characters per response; more → 413")
    max_body_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="request body bytes, declared or streamed; more → 413"
    )
    math_timeout_s: float = Field(RewardConfig.model_fields["math_timeout_s"].default, gt=0, le=120.0)
    # All the math checks of one request end by then (scoring 0 with a note), well before the client's
    # http_timeout_s (120 s) would give up on the whole chunk.
    math_deadline_s: float = Field(
        60.0, gt=0, le=600.0, description="limit for the math checks of one request"
    )
    item_timeout_s: float = Field(
        RewardConfig.model_fields["item_timeout_s"].default,
        gt=0,
        le=600.0,
        description="limit for scoring one item; an item past it fails alone (`error`)",
    )
    # Scoring is CPU-bound Python: more threads than this per worker only fight over the GIL and make the
    # latency tail unfair; waiting requests queue in arrival order instead.
    score_threads: int = Field(4, ge=1, description="batches scored at once per uvicorn worker")
    math_workers: int = Field(
        default_factory=default_math_workers, ge=1, le=64, description="math helpers per uvicorn worker"
    )
    warm_math: bool = Field(True, description="start the math helpers at startup")
    # The only reward functions the service will run: its operator's choice at start, never a request's.
    functions: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="reward functions served by name: 'name=path/file.py:function', comma-separated",
    )
    function_timeout_s: float = Field(
        RewardConfig.model_fields["function_timeout_s"].default, gt=0, le=3600.0,
        description="limit for one call of a reward function; past it, that item fails",
    )  # fmt: skip
    function_concurrency: int = Field(
        RewardConfig.model_fields["function_concurrency"].default, ge=1, le=1024,
        description="calls of one reward function at once, per uvicorn worker",
    )  # fmt: skip

    @field_validator("functions", mode="before")
    @classmethod
    def _split_functions(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        served: dict[str, str] = {}
        for entry in filter(None, (e.strip() for e in value.split(","))):
            name, sep, target = entry.partition("=")
            if not sep or not name.strip() or not target.strip():
                raise ValueError(
                    f"REELRL_REWARD_FUNCTIONS entry {entry!r}: expected name=path/file.py:function"
                )
            if name.strip() in served:
                raise ValueError(f"REELRL_REWARD_FUNCTIONS names {name.strip()!r} twice")
            served[name.strip()] = target.strip()
        return served
