"""Mean relative accuracy: θ ∈ {0.50, 0.55, …, 0.95}; pass iff |p − t|/|t| ≤ 1 − θ."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.reward.metrics.mra import mean_relative_accuracy


@pytest.mark.parametrize(
    ("pred", "truth", "expected"),
    [
        (10, 10, 1.0),  # error 0 passes all 10 thresholds
        (12, 10, 0.7),  # error 0.2 ≤ 1 − θ for θ ∈ {0.50 … 0.80}: 7 of 10 (0.80 exactly on the boundary)
        (8, 10, 0.7),  # |8 − 10| / 10 = 0.2: symmetric around the truth
        (10.4, 10, 1.0),  # 0.04 ≤ 0.05 (θ = 0.95) passes all
        (10.6, 10, 0.9),  # 0.06 fails only θ = 0.95
        (14.9, 10, 0.1),  # 0.49 ≤ 0.50 passes θ = 0.50 only
        (15, 10, 0.1),  # 0.5 on the θ = 0.50 boundary still passes
        (15.1, 10, 0.0),  # 0.51 fails everything
        (-10, 10, 0.0),  # error 2.0
        (0, 0, 1.0),  # a zero truth: only an exact zero is right
        (0.1, 0, 0.0),
        (-3.3, -3, 0.9),  # |−3.3 + 3| / 3 = 0.1: passes θ ≤ 0.90 → 9 of 10
        (math.nan, 10, 0.0),
        (math.inf, 10, 0.0),
        # boundaries that binary floats miss: |3.465 − 3.3|/3.3 = 0.165/3.3 = 0.05 exactly ≤ 0.05 → all 10
        (3.465, 3.3, 1.0),
        (0.55, 0.5, 0.9),  # 0.05/0.5 = 0.1 ≤ 0.1 passes θ ≤ 0.90 → 9 of 10
        (0.7, 0.5, 0.3),  # 0.2/0.5 = 0.4 ≤ 1 − θ for θ ∈ {0.50, 0.55, 0.60} → 3 of 10
    ],
)
def test_mean_relative_accuracy(pred, truth, expected):
    assert mean_relative_accuracy(pred, truth) == pytest.approx(expected)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(finite, finite)
def test_mra_is_a_multiple_of_a_tenth_in_unit_interval(pred, truth):
    value = mean_relative_accuracy(pred, truth)
    assert 0.0 <= value <= 1.0
    assert round(value * 10) == pytest.approx(value * 10)


@given(finite.filter(lambda t: abs(t) > 1e-3), st.floats(min_value=0, max_value=2, allow_nan=False))
def test_mra_symmetric_around_truth_and_monotone(truth, rel):
    over = mean_relative_accuracy(truth * (1 + rel), truth)
    under = mean_relative_accuracy(truth * (1 - rel), truth)
    assert over == pytest.approx(under, abs=0.1 + 1e-9)  # equal up to float rounding at a boundary
    assert mean_relative_accuracy(truth * (1 + rel / 2), truth) >= over
