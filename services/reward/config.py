"""Reward configuration: the weights and limits every caller (trainer, evaluator, HTTP service) shares.

``ScoringOptions`` is what changes the numbers and travels with an HTTP request; ``RewardConfig`` adds
where scoring runs (in-process or a service URL) and the limits that protect a worker. The trainer's config
tree embeds ``RewardConfig``.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, model_validator


def default_math_workers() -> int:
    """Four helpers, fewer on a small machine: each holds ~120 MB and takes seconds of CPU to start."""
    return min(4, os.cpu_count() or 1)


class ScoringOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    w_acc: float = Field(0.9, ge=0.0, le=1.0, description="weight of accuracy in `overall`")
    w_fmt: float = Field(0.1, ge=0.0, le=1.0, description="weight of the format score in `overall`")
    strict_format: bool = Field(False, description="format 1 only for `<think>…</think><answer>…</answer>`")
    # Longer responses score 0 everywhere: a reward for a 100k-character ramble invites reward hacking.
    max_response_chars: int = Field(60_000, gt=0)

    @model_validator(mode="after")
    def _some_weight(self) -> ScoringOptions:
        if self.w_acc + self.w_fmt <= 0:
            raise ValueError("w_acc + w_fmt must be > 0 (every overall reward would be 0)")
        return self


class RewardConfig(ScoringOptions):
    """``url=None`` scores in-process; a URL sends batches to ``reelrl serve reward``."""

    url: str | None = Field(None, description="reward service base URL, e.g. http://reward:8100")
    math_timeout_s: float = Field(5.0, gt=0.0, le=120.0, description="limit for one math equivalence check")
    # None in-process: no caller waits with a timeout, and a deadline would zero correct answers of a big
    # evaluation batch. The HTTP service sets its own (RewardServiceSettings.math_deadline_s).
    math_deadline_s: float | None = Field(
        None, gt=0.0, le=3600.0, description="limit for all math checks of one batch; later ones score 0"
    )
    math_workers: int = Field(
        default_factory=default_math_workers,
        ge=1,
        le=64,
        description="math helper processes (a bounded pool) per process; default min(4, CPUs)",
    )
    # Normal items take milliseconds; the limit stops a pathological one (every input is bounded, but a
    # parser can still be slow on crafted text) and fails that item alone. Math checks keep their own limits.
    item_timeout_s: float = Field(
        10.0,
        gt=0.0,
        le=600.0,
        description="limit for scoring one item in this process (reading sample and response, accuracy "
        "except math checks); an item past it fails alone with `error`",
    )
    http_timeout_s: float = Field(120.0, gt=0.0)
    http_batch_size: int = Field(256, gt=0, description="items per HTTP request (the server caps it)")
    http_retries: int = Field(3, ge=0)

    def scoring_options(self) -> ScoringOptions:
        return ScoringOptions(**{name: getattr(self, name) for name in ScoringOptions.model_fields})
