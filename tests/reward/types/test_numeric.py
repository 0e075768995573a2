"""Numerical, regression and counting, table-driven through ``score``."""

import pytest

from services.reward import InvalidSample, score


@pytest.mark.parametrize(
    ("answer", "response", "accuracy", "fmt"),
    [
        ("3.14", "<answer>3.14159</answer>", 1.0, 1.0),  # round(3.14159, 2) = 3.14
        ("3.14", "<answer>3.15</answer>", 0.0, 1.0),
        (1234.5, "<answer>1,234.5 meters</answer>", 1.0, 1.0),
        ("0.75", "<answer>3/4</answer>", 1.0, 1.0),
        ("0.5", r"<answer>\frac{1}{2}</answer>", 1.0, 1.0),
        ("1200", "<answer>1.2e3</answer>", 1.0, 1.0),
        ("12", "<answer>twelve</answer>", 1.0, 1.0),
        ("45", "<answer>45%</answer>", 1.0, 1.0),
        ("-2", "<answer>−2</answer>", 1.0, 1.0),
        ("7", "The answer is 7.", 1.0, 0.0),
        ("7", r"<answer>\boxed{7}</answer>", 1.0, 1.0),
        ("7", "<answer>7 or 8</answer>", 0.0, 0.5),  # a hedge is no number
        ("8", "<answer>seven point something</answer>", 0.0, 1.0),  # reads "seven": wrong value, fine type
        ("7", "<answer>unknown</answer>", 0.0, 0.5),
        # exactly one side a percent: as written or divided by 100
        ("0.75", "<answer>75%</answer>", 1.0, 1.0),  # 75/100 = 0.75
        ("75%", "<answer>0.75</answer>", 1.0, 1.0),
        ("0.25", "<answer>25 percent</answer>", 1.0, 1.0),
        ("0.75", "<answer>80%</answer>", 0.0, 1.0),  # neither 80 nor 0.8 is 0.75
        ("75%", "<answer>0.75%</answer>", 0.0, 1.0),  # both percents: 0.75 ≠ 75
        # scale words after digits multiply
        ("1500000", "<answer>1.5 million</answer>", 1.0, 1.0),  # 1.5·10^6
        ("1.5", "<answer>1.5 million</answer>", 0.0, 1.0),
        ("2500", "<answer>2.5 thousand</answer>", 1.0, 1.0),
        ("300", "<answer>3 hundred</answer>", 1.0, 1.0),
    ],
)
def test_numerical(answer, response, accuracy, fmt):
    result = score({"problem_type": "numerical", "answer": answer}, response)
    assert (result.accuracy, result.format) == (accuracy, fmt)


@pytest.mark.parametrize(
    ("answer", "response", "accuracy"),
    [
        ("10", "<answer>10</answer>", 1.0),
        ("10", "<answer>12 m</answer>", 0.7),  # |12 − 10|/10 = 0.2 → θ 0.50…0.80 pass: 7/10
        ("10", "<answer>9.5</answer>", 1.0),  # 0.05 ≤ 1 − 0.95 passes all 10
        ("10", "<answer>16</answer>", 0.0),  # 0.6 > 0.5
        # |2 − 2.5|/2.5 = 0.2; compared as 20·0.5 = 10 ≤ (20 − k)·2.5, true for k ≤ 16 → 7/10
        ("2.5", "<answer>about 2 meters</answer>", 0.7),
        ("0", "<answer>0</answer>", 1.0),
        # one side a percent: the better reading. 0.5 vs 55/100: |0.55 − 0.5|/0.5 = 0.1 → 20·0.05 = 1 ≤
        # (20 − k)·0.5 for k ≤ 18 → 9/10 (the reading 55 vs 0.5 scores 0)
        ("0.5", "<answer>55%</answer>", 0.9),
    ],
)
def test_regression(answer, response, accuracy):
    assert score({"problem_type": "regression", "answer": answer}, response).accuracy == pytest.approx(
        accuracy
    )


@pytest.mark.parametrize(
    ("answer", "response", "accuracy", "fmt", "extracted"),
    [
        (3, "<answer>3</answer>", 1.0, 1.0, 3),
        ("3", "<answer>three</answer>", 1.0, 1.0, 3),
        ("2", "<answer>twice</answer>", 1.0, 1.0, 2),
        ("0", "<answer>none</answer>", 1.0, 1.0, 0),
        ("3", "<answer>3.0</answer>", 1.0, 1.0, 3),
        ("3", "<answer>4</answer>", 0.0, 1.0, 4),
        ("3", "<answer>2.5</answer>", 0.0, 0.5, None),  # not a whole number
        ("3", "<answer>-3</answer>", 0.0, 0.5, None),
    ],
)
def test_counting(answer, response, accuracy, fmt, extracted):
    result = score({"problem_type": "counting", "answer": answer}, response)
    assert (result.accuracy, result.format, result.extracted) == (accuracy, fmt, extracted)


@pytest.mark.parametrize("kind", ["numerical", "regression", "counting"])
def test_non_numeric_truth_is_rejected(kind):
    with pytest.raises(InvalidSample, match="not a single number"):
        score({"problem_type": kind, "answer": "many"}, "<answer>3</answer>")


@pytest.mark.parametrize("kind", ["numerical", "regression", "counting"])
@pytest.mark.parametrize(
    ("answer", "problem"),
    [(float("nan"), "not a finite number"), (float("inf"), "not a finite number"), (10**400, "beyond float")],
    ids=["nan", "inf", "10^400"],
)
def test_non_finite_truth_is_rejected_naming_the_sample(kind, answer, problem):
    with pytest.raises(InvalidSample, match=f"sample 'n7': {kind} answer .*{problem}"):
        score({"problem_type": kind, "answer": answer, "id": "n7"}, "<answer>1</answer>")
