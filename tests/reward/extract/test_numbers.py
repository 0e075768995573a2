"""Numbers in the ways answers write them."""

import pytest

from services.reward.extract.numbers import (
    Number,
    find_numbers,
    numbers_equal,
    read_numbers,
    single_number,
    single_reading,
    value_pairs,
)


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
        ("1.5 million", [1_500_000.0]),  # a scale word after digits multiplies: 1.5·10^6
        ("3 hundred", [300.0]),
        ("2.5 thousand people", [2500.0]),
        ("4 Billion", [4e9]),
        ("two billion", [2e9]),
        ("1.5 millionaires", [1.5]),  # only the whole word scales
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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("75%", [Number(75.0, True)]),
        ("75 percent", [Number(75.0, True)]),
        (r"75\%", [Number(75.0, True)]),
        ("75", [Number(75.0, False)]),
        ("seventy", [Number(70.0, False)]),
    ],
)
def test_read_numbers_marks_percents(text, expected):
    assert read_numbers(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("75% (75%)", Number(75.0, True)),
        ("75%, i.e. 75", Number(75.0, False)),  # a percent only when every mention is one
        ("75% or 80%", None),
    ],
)
def test_single_reading(text, expected):
    assert single_reading(text) == expected


@pytest.mark.parametrize(
    ("pred", "truth", "pairs"),
    [
        (Number(75.0, True), Number(0.75), [(75.0, 0.75), (0.75, 0.75)]),  # 75/100
        (Number(0.75), Number(75.0, True), [(0.75, 75.0), (0.75, 0.75)]),
        (Number(75.0, True), Number(75.0, True), [(75.0, 75.0)]),  # both percents: as written
        (Number(3.0), Number(3.0), [(3.0, 3.0)]),
    ],
)
def test_value_pairs(pred, truth, pairs):
    assert value_pairs(pred, truth) == pairs
