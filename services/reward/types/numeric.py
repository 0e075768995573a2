"""Number answers: numerical (equal to 2 decimals), regression (mean relative accuracy), counting.

When exactly one of answer and truth is written as a percent, it matches as written or divided by 100
("75%" is right for both 75 and 0.75); the better of the two readings counts.
"""

from __future__ import annotations

import math
from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.numbers import Number, numbers_equal, single_reading, value_pairs
from services.reward.metrics.mra import mean_relative_accuracy
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample


def number_truth(sample: RewardSample, kind: str) -> Number:
    """The truth as a ``Number``; NaN, ±inf and integers beyond float range are refused, naming the sample
    (a NaN truth would silently score every answer 0)."""
    raw = sample.answer
    reading = None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            reading = Number(float(raw))
        except OverflowError:  # an int too large for a float
            raise InvalidSample(
                f"{sample.label}: {kind} answer {str(raw)[:60]}… is beyond float range"
            ) from None
        if not math.isfinite(reading.value):
            raise InvalidSample(f"{sample.label}: {kind} answer {raw!r} is not a finite number")
    elif isinstance(raw, str):
        reading = single_reading(raw)  # never NaN/inf: the reader only knows digits
    if reading is None:
        raise InvalidSample(f"{sample.label}: {kind} answer {str(raw)[:60]!r} is not a single number")
    return reading


@register
class Numerical(ProblemType):
    name = "numerical"
    aliases = ("number", "numeric")
    description = "One number (units, separators, fractions, %, words accepted); equal to 2 decimals."

    def parse_truth(self, sample: RewardSample) -> Number:
        return number_truth(sample, self.name)

    def extract(self, text: str, sample: RewardSample) -> Number | None:
        return single_reading(text)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 1.0 if any(numbers_equal(p, t) for p, t in value_pairs(parsed, truth)) else 0.0

    def jsonable(self, parsed: Any) -> Any:
        return parsed.value


@register
class Regression(ProblemType):
    name = "regression"
    description = "One number; mean relative accuracy over thresholds 0.50:0.05:0.95."

    def parse_truth(self, sample: RewardSample) -> Number:
        return number_truth(sample, self.name)

    def extract(self, text: str, sample: RewardSample) -> Number | None:
        return single_reading(text)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return max(mean_relative_accuracy(p, t) for p, t in value_pairs(parsed, truth))

    def jsonable(self, parsed: Any) -> Any:
        return parsed.value


@register
class Counting(ProblemType):
    name = "counting"
    aliases = ("count",)
    description = "One non-negative whole number (digits or words, 'twice'); exact match."

    def parse_truth(self, sample: RewardSample) -> int:
        value = number_truth(sample, self.name).value
        if value < 0 or value != int(value):
            raise InvalidSample(f"{sample.label}: counting answer {value} is not a non-negative integer")
        return int(value)

    def extract(self, text: str, sample: RewardSample) -> int | None:
        reading = single_reading(text)
        if reading is None or reading.value < 0 or reading.value != int(reading.value):
            return None
        return int(reading.value)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 1.0 if parsed == truth else 0.0
