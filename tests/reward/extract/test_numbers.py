"""Numbers in the ways answers write them."""

import pytest

from services.reward.extract.numbers import find_numbers, numbers_equal, single_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", [42.0]),
        ("-3", [-3.0]),
        ("−4 (unicode minus)", [-4.0]),
        ("1,234.5 apples", [1234.5]),  # thousands separator
        ("3/4", [0.75]),
        (r"\frac{3}{4}", [0.75]),
        (r"-\frac{1}{2}", [-0.5]),
        ("45%", [45.0]),  # a percent keeps the written value
        ("1.2e3", [1200.0]),
        ("1.2 × 10^3", [1200.0]),
        (r"2.5 \times 10^{-2}", [0.025]),
        ("12 meters", [12.0]),  # units are ignored
        ("12.5s to 20s", [12.5, 20.0]),
        ("1, 2, 3", [1.0, 2.0, 3.0]),  # a list is three numbers, not 123
        ("seven", [7.0]),
        ("twenty-one", [21.0]),
        ("three hundred and five", [305.0]),  # 3·100 + 5
        ("two thousand and twelve", [2012.0]),  # 2·1000 + 12
        ("twice", [2.0]),
        ("none", [0.0]),
        ("seven, or 8", [8.0]),  # words only count when no digits are written
        ("1e999", []),  # beyond float range: not a number
        ("3/0", []),  # division by zero: not a number
        ("no number here", []),
    ],
)
def test_find_numbers(text, expected):
    assert find_numbers(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("about 12 meters", 12.0),
        ("12 or 12.0", 12.0),  # the same value twice is still one answer
        ("10 or 12", None),  # a hedge
        ("between 3 and 4", None),
        ("", None),
    ],
)
def test_single_number(text, expected):
    assert single_number(text) == expected


@pytest.mark.parametrize(
    ("pred", "truth", "equal"),
    [
        (3.14159, 3.14, True),  # round(3.14159, 2) = 3.14
        (3.149, 3.14, False),  # round(3.149, 2) = 3.15
        (2.0, 2, True),
        (1e12 + 0.001, 1e12, True),
        (0.5, -0.5, False),
    ],
)
def test_numbers_equal(pred, truth, equal):
    assert numbers_equal(pred, truth) is equal
