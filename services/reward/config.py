"""Reward configuration: the weights and limits every caller (trainer, evaluator, HTTP service) shares.

``ScoringOptions`` is what changes the numbers and travels with an HTTP request; ``RewardConfig`` adds
where scoring runs (in-process or a service URL) and the limits that protect a worker. The trainer's config
tree embeds ``RewardConfig``.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.reward.judge import JUDGE_PROMPT

# Metric names a reward part may not take: reward/<name> would collide with the library's own.
RESERVED_PART_NAMES = frozenset(
    {"overall", "accuracy", "format", "errors", "builtin", "all", "overlong_penalty"}
)


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


def repeated(names: list[str]) -> list[str]:
    """The names given more than once, sorted (each reward part is a metric: two would share it)."""
    return sorted({name for name in names if names.count(name) > 1})


class RewardFunctionConfig(BaseModel):
    """One reward function in the mix (services/reward/functions.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(
        pattern=r"^[a-z][a-z0-9_]{0,63}$", description="its metric: reward/<name> (lower case, digits, _)"
    )
    path: str | None = Field(
        None,
        description="'file.py:function' to load here; unset: the reward service (reward.url) serves a "
        "function of this name, configured by its operator",
    )
    weight: float = Field(1.0, description="its weight in `overall` (any sign)")


class JudgeRewardConfig(BaseModel):
    """An LLM judge as a reward part (services/reward/judge.py): an OpenAI-compatible chat endpoint."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    url: str = Field(description="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1 (`vllm serve`)")
    model: str = Field(description="the model name the endpoint serves")
    name: str = Field("judge", pattern=r"^[a-z][a-z0-9_]{0,63}$", description="its metric: reward/<name>")
    weight: float = Field(1.0, description="its weight in `overall`")
    template: str = Field(
        JUDGE_PROMPT, description="the user turn; {question}, {answer} and {response} are filled in"
    )
    system: str | None = Field(None, description="a system turn before it")
    parser: Literal["verdict", "score"] = Field(
        "verdict", description="verdict: 'Correct' 1 / 'Incorrect' 0; score: one grade out of score_max"
    )
    score_max: float = Field(10.0, gt=0.0, description="the top grade of the `score` parser")
    constrain: bool = Field(
        False, description="ask vLLM's structured outputs to answer only 'Correct' or 'Incorrect' (verdict)"
    )
    max_tokens: int = Field(16, gt=0, le=32_768)
    temperature: float = Field(0.0, ge=0.0)
    concurrency: int = Field(8, ge=1, le=1024, description="requests in flight at once")
    request_timeout_s: float = Field(60.0, gt=0.0, le=3600.0, description="limit for one request")
    # 5 retries from 1 s wait 31 s in all: a judge restarting between steps is waited for, one that stays
    # down for a whole step fails the step (every item failed) rather than train on the builtin alone
    retries: int = Field(5, ge=0, le=20, description="retries of a transport error or 429/5xx answer")
    backoff_s: float = Field(1.0, ge=0.0, le=60.0, description="the first retry's wait; doubles each time")
    timeout_s: float = Field(
        300.0, gt=0.0, le=7200.0, description="limit for one item's verdict, retries included"
    )
    cache_size: int = Field(100_000, ge=0, description="verdicts kept, by (prompt, response, template)")
    api_key_env: str | None = Field(
        None, description="the environment variable holding a bearer token (never the token itself)"
    )

    @model_validator(mode="after")
    def _template_fills(self) -> JudgeRewardConfig:
        try:
            self.template.format(question="q", answer="a", response="r")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"reward.judge.template: {exc!r}; it may use only {{question}}, {{answer}} and {{response}} "
                "(double other braces)"
            ) from None
        if "{response}" not in self.template:
            raise ValueError("reward.judge.template never shows the judge the {response}")
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

    functions: list[RewardFunctionConfig] = Field(
        default_factory=list,
        description="reward functions mixed into `overall`: builtin_weight × the problem type's overall + "
        "Σ weight × function score; each logged as reward/<name>",
    )
    builtin_weight: float = Field(
        1.0, ge=0.0, description="weight of the problem type's own `overall` in a mix with reward functions"
    )
    function_timeout_s: float = Field(
        30.0,
        gt=0.0,
        le=3600.0,
        description="limit for one call of a reward function; past it, that item fails",
    )
    function_concurrency: int = Field(16, ge=1, le=1024, description="calls of one reward function at once")
    judge: JudgeRewardConfig | None = Field(
        None, description="an LLM judge mixed into `overall` as the part reward/<judge.name>"
    )

    @model_validator(mode="after")
    def _distinct_function_names(self) -> RewardConfig:
        names = [f.name for f in self.functions] + ([self.judge.name] if self.judge else [])
        taken = repeated(names)
        if taken:
            raise ValueError(
                f"reward.functions: the names {taken} are used more than once (each is a metric)"
            )
        remote = [f.name for f in self.functions if f.path is None]
        if remote and not self.url:
            raise ValueError(
                f"reward.functions {remote}: no path, and no reward service (reward.url) to serve them by "
                "name; give each a path ('file.py:function') or set reward.url"
            )
        reserved = sorted(RESERVED_PART_NAMES.intersection(names))
        if reserved:
            raise ValueError(
                f"reward.functions: {reserved} would shadow the library's own reward/<name> metrics; "
                "choose another name"
            )
        return self

    def builtin_only(self) -> RewardConfig:
        """This config without the mix's functions and judge: the problem types' own reward, what the
        rollout's mix gate reads (it needs accuracy only, and must not pay for or fail on the others)."""
        return self.model_copy(update={"functions": [], "judge": None})

    def scoring_options(self) -> ScoringOptions:
        return ScoringOptions(**{name: getattr(self, name) for name in ScoringOptions.model_fields})
