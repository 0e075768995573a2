"""Math: symbolic equivalence through math-verify helper processes."""

import pytest

from services.reward import RewardConfig, score


@pytest.mark.parametrize(
    ("answer", "response", "accuracy", "extracted"),
    [
        ("0.5", r"<answer>\boxed{\frac{1}{2}}</answer>", 1.0, r"\frac{1}{2}"),  # exact fraction, no helper
        ("3", "<answer>3.0</answer>", 1.0, "3.0"),
        ("3", "<answer>4</answer>", 0.0, "4"),  # two integers differ: decided in-process
        (r"\frac{1}{7}", r"<answer>\boxed{0.142857}</answer>", 1.0, "0.142857"),  # math-verify: 6 decimals
        (r"$x^2+2x+1$", r"<answer>\boxed{(x+1)^2}</answer>", 1.0, "(x+1)^2"),  # symbolic, $…$ stripped
        ("x^2+2x+1", r"<answer>\boxed{(x+1)^3}</answer>", 0.0, "(x+1)^3"),
        (r"\boxed{2\pi}", r"so the answer is \boxed{2 \pi}", 1.0, r"2 \pi"),  # spacing only
        (r"\sqrt{2}", r"<think>a² = 2</think><answer>\boxed{\sqrt 2}</answer>", 1.0, r"\sqrt 2"),
    ],
)
def test_math(answer, response, accuracy, extracted):
    result = score({"problem_type": "math", "answer": answer}, response)
    assert (result.accuracy, result.extracted) == (accuracy, extracted)


def test_absurd_expression_is_refused_with_a_note():
    result = score({"problem_type": "math", "answer": "10"}, r"<answer>\boxed{9^{9^{9^{9}}}}</answer>")
    assert (result.accuracy, result.format, result.error) == (0.0, 1.0, None)
    assert result.note == (
        "math equivalence check refused (answer: 9^{9^{9}} needs about 369,693,100 digits (at most 100,000))"
    )


@pytest.mark.slow
def test_slow_expression_scores_zero_with_a_note():
    config = RewardConfig(math_timeout_s=0.5)
    # not refused by the pre-check (a product of sums raised to a power), far slower than 0.5 s in sympy
    result = score(
        {"problem_type": "math", "answer": "1"}, r"<answer>\boxed{((x+1)(y+1)(z+1))^{20}}</answer>", config
    )
    assert (result.accuracy, result.format) == (0.0, 1.0)
    assert "timed out" in result.note
