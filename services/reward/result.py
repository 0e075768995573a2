"""What scoring one response returns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class RewardResult(BaseModel):
    """Every component separately (GDPO normalises them per group), plus what was read from the response.

    ``error`` is set only by batch interfaces (HTTP, ``RewardClient``) for an item that could not be
    scored at all (unknown type, unusable ground truth) or not within ``item_timeout_s``; its scores are
    then 0. ``note`` explains a
    deliberate zero that is not an error (response over the length limit, math check timed out).
    """

    model_config = ConfigDict(frozen=True)

    overall: float
    accuracy: float
    format: float
    extracted: Any = None
    problem_type: str | None = None
    error: str | None = None
    note: str | None = None
    # A reward mix (``reward.functions``): every named part of ``overall`` ("builtin" for the problem
    # type's overall, each function by its name, a function's extra values as "<name>/<key>"), unweighted.
    parts: dict[str, float] | None = None

    @classmethod
    def failed(cls, error: str, problem_type: str | None = None) -> RewardResult:
        return cls(overall=0.0, accuracy=0.0, format=0.0, problem_type=problem_type, error=error)
