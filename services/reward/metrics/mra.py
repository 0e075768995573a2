"""Mean relative accuracy (VSI-Bench): the share of confidence thresholds θ ∈ {0.50, 0.55, …, 0.95} at
which the relative error |pred − truth| / |truth| is at most 1 − θ."""

from __future__ import annotations

import math
from fractions import Fraction

# θ = k/20 for k = 10…19, kept as integers so the comparison at a boundary is exact.
_THRESHOLD_STEPS = range(10, 20)


def mean_relative_accuracy(pred: float, truth: float) -> float:
    """MRA in [0, 1] (multiples of 0.1). ``truth == 0`` scores 1 only for an exact 0; non-finite → 0.

    For each θ = k/20: pass iff |p − t|/|t| ≤ 1 − k/20  ⇔  20·|p − t| ≤ (20 − k)·|t|, evaluated exactly on
    the decimals the floats print as (``Fraction(str(x))``): in binary floating point 3.465 − 3.3 is a
    hair above 0.165, which would fail truth 3.3 / prediction 3.465 at θ = 0.95 although the error is
    exactly 5 %.
    """
    if not (math.isfinite(pred) and math.isfinite(truth)):
        return 0.0
    if truth == 0:
        return 1.0 if pred == 0 else 0.0
    exact_pred, exact_truth = Fraction(str(pred)), Fraction(str(truth))
    error, scale = 20 * abs(exact_pred - exact_truth), abs(exact_truth)
    passed = sum(1 for k in _THRESHOLD_STEPS if error <= (20 - k) * scale)
    return passed / len(_THRESHOLD_STEPS)
