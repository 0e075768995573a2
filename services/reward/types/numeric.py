"""Number answers: numerical (equal to 2 decimals), regression (mean relative accuracy), counting."""

from __future__ import annotations

from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.numbers import numbers_equal, single_number
from services.reward.metrics.mra import mean_relative_accuracy
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample


def number_truth(sample: RewardSample, kind: str) -> float:
    raw = sample.answer
    value = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    if value is None and isinstance(raw, str):
        value = single_number(raw)
    if value is None:
        raise InvalidSample(f"{sample.label}: {kind} answer {str(raw)[:60]!r} is not a single number")
    return value


@register
class Numerical(ProblemType):
    name = "numerical"
    aliases = ("number", "numeric")
    description = "One number (units, separators, fractions, %, words accepted); equal to 2 decimals."

    def parse_truth(self, sample: RewardSample) -> float:
        return number_truth(sample, self.name)

    def extract(self, text: str, sample: RewardSample) -> float | None:
        return single_number(text)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 1.0 if numbers_equal(parsed, truth) else 0.0


@register
class Regression(ProblemType):
    name = "regression"
    description = "One number; mean relative accuracy over thresholds 0.50:0.05:0.95."

    def parse_truth(self, sample: RewardSample) -> float:
        return number_truth(sample, self.name)

    def extract(self, text: str, sample: RewardSample) -> float | None:
        return single_number(text)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return mean_relative_accuracy(parsed, truth)


@register
class Counting(ProblemType):
    name = "counting"
    aliases = ("count",)
    description = "One non-negative whole number (digits or words, 'twice'); exact match."

    def parse_truth(self, sample: RewardSample) -> int:
        value = number_truth(sample, self.name)
        if value < 0 or value != int(value):
            raise InvalidSample(f"{sample.label}: counting answer {value} is not a non-negative integer")
        return int(value)

    def extract(self, text: str, sample: RewardSample) -> int | None:
        value = single_number(text)
        if value is None or value < 0 or value != int(value):
            return None
        return int(value)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 1.0 if parsed == truth else 0.0
