"""Errors raised by the reward library; each names the sample, field or problem type at fault."""

from __future__ import annotations


class RewardError(ValueError):
    """Base class: the input cannot be scored (as opposed to a response that merely scores 0)."""


class InvalidSample(RewardError):
    """The sample itself is unusable: missing answer, ill-typed ground truth, bad options."""


class ItemTimeout(RewardError):
    """Scoring one item took longer than its limit (``RewardConfig.item_timeout_s``): the inputs are too
    big or too pathological to score in time."""


class UnknownProblemType(InvalidSample):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown problem_type {name!r}; known types (aliases accepted): {', '.join(known)}")
        self.name = name
        self.known = known
