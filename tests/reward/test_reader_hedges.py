"""Hedges the readers outside grounding let through, found looking over every reader (issue 36 §4).

Each case offered two answers and the reader silently took one of them (the last ``\\boxed{}``, the
leading "Yes", the digits before a spelled-out number, the last code block). Each expected value is
worked out by hand in the comment beside it; each hedge is pinned in the form the reader accepts.
"""

import pytest

from services.reward import InvalidSample, score

MC = {
    "problem_type": "multiple choice",
    "answer": "B",
    "options": ["A. red", "B. blue", "C. green", "D. pink"],
}
NUMERICAL = {"problem_type": "numerical", "answer": "4"}
COUNTING = {"problem_type": "counting", "answer": 4}
REGRESSION = {"problem_type": "regression", "answer": "4"}
MATH = {"problem_type": "math", "answer": "4"}
YES = {"problem_type": "boolean", "answer": "yes"}
NO = {"problem_type": "boolean", "answer": "no"}
PAIRWISE = {"problem_type": "preference", "answer": "first"}
POINTWISE = {"problem_type": "preference", "answer": "8", "score_range": [0, 10]}
TEMPORAL = {"problem_type": "temporal grounding", "answer": {"time": [10, 30]}}


def _accuracy(sample: dict, text: str) -> float:
    return score(sample, f"<answer>{text}</answer>").accuracy


# --- several \boxed{} -----------------------------------------------------------------------------------
# The answer text was narrowed to the last \boxed{}, so "\boxed{A} or \boxed{B}" read B: whichever came last
# earned. Several boxes saying different things are a hedge; one box, or the same one twice, is the answer.

BOXED = [
    # (sample, the right answer, a wrong one)
    (MC, "B", "A"),
    (NUMERICAL, "4", "5"),
    (COUNTING, "4", "5"),
    (REGRESSION, "4", "8"),  # 8 against 4 alone: error 1 passes no threshold, MRA 0
    (MATH, "4", "5"),
    (YES, "yes", "no"),
    (PAIRWISE, "Response 1", "Response 2"),
    (POINTWISE, "8", "2"),  # 2 alone: 1 − |2 − 8| / 10 = 0.4
    (TEMPORAL, "[10, 30]", "[40, 50]"),
]


@pytest.mark.parametrize(("sample", "right", "wrong"), BOXED)
def test_two_different_boxed_answers_earn_nothing(sample, right, wrong):
    assert _accuracy(sample, rf"\boxed{{{right}}}") == 1.0
    for first, second in ((wrong, right), (right, wrong)):
        for joint in (" or ", "\n", ". Wait, "):
            assert _accuracy(sample, rf"\boxed{{{first}}}{joint}\boxed{{{second}}}") == 0.0
    # without an answer block the body is narrowed the same way (format 0, accuracy alone)
    assert score(sample, rf"\boxed{{{wrong}}} or \boxed{{{right}}}").accuracy == 0.0


@pytest.mark.parametrize(("sample", "right", "wrong"), BOXED)
def test_the_same_boxed_answer_twice_is_one_answer(sample, right, wrong):
    assert _accuracy(sample, rf"\boxed{{{right}}}, so \boxed{{{right}}}") == 1.0
    assert _accuracy(sample, rf"\boxed{{\boxed{{{right}}}}}") == 1.0  # a box in a box says the same


def test_a_box_holding_another_box_beside_text_is_read_whole():
    # "\boxed{5 or \boxed{4}}": the last-opened box alone said 4 (1.0); the outer box says "5 or 4", a hedge
    assert _accuracy(NUMERICAL, r"\boxed{5 or \boxed{4}}") == 0.0
    assert _accuracy(MC, r"\boxed{A, \boxed{B}}") == 0.0


# --- boolean: a verdict and its opposite ------------------------------------------------------------------
# A leading yes/no decided unless the rest stated the other yes/no on its own; "true"/"false" standing alone
# after it were not looked at, so "Yes. False." read yes.


@pytest.mark.parametrize(
    ("sample", "hedge"),
    [
        (YES, "Yes. False."),
        (YES, "Yes, false"),
        (YES, "**Yes** / false"),
        (NO, "No. True."),
        (NO, "No; true"),
    ],
)
def test_a_leading_verdict_with_the_opposite_truth_value_earns_nothing(sample, hedge):
    assert _accuracy(sample, hedge) == 0.0


@pytest.mark.parametrize(
    ("sample", "answer"),
    [
        (NO, "No, that's not true"),  # "true" inside a sentence is no second answer
        (YES, "Yes, that is true."),
        (YES, "Yes. True."),  # the same verdict twice
        (NO, "No, false."),
    ],
)
def test_a_leading_verdict_with_words_that_agree_is_read(sample, answer):
    assert _accuracy(sample, answer) == 1.0


# --- numbers written in two ways ---------------------------------------------------------------------------
# Spelled-out numbers were read only when no digits were written, so "4 or five" read 4 and earned it. A
# spelled-out number beside digits is a second value; "one" ("the one on the left") and the adverbs
# ("twice", "none") are words there, not numbers.


@pytest.mark.parametrize("sample", [NUMERICAL, COUNTING, REGRESSION])
@pytest.mark.parametrize("hedge", ["4 or five", "five or 4", "4, maybe three", "4 (or eight)"])
def test_digits_beside_another_spelled_out_number_earn_nothing(sample, hedge):
    assert _accuracy(sample, hedge) == 0.0


def test_a_pointwise_score_beside_another_spelled_out_earns_nothing():
    # 8 alone: 1 − 0/10 = 1; "8 or nine" offers two scores: 0
    assert _accuracy(POINTWISE, "8 or nine") == 0.0


@pytest.mark.parametrize("sample", [NUMERICAL, COUNTING, REGRESSION])
@pytest.mark.parametrize(
    "answer", ["4 (four)", "four, i.e. 4", "4, the one on the left", "4, I counted twice"]
)
def test_digits_beside_the_same_number_or_a_word_are_read(sample, answer):
    assert _accuracy(sample, answer) == 1.0


# --- code: several blocks -----------------------------------------------------------------------------------
# The last fenced block was the answer, so two different programs were scored by the last one.

SVG = '<svg xmlns="http://www.w3.org/2000/svg"><rect x="1" width="2"/><circle r="3"/></svg>'
EMPTY_SVG = '<svg xmlns="http://www.w3.org/2000/svg"/>'
CODE = {"problem_type": "svg-code", "answer": SVG}


def _fence(code: str) -> str:
    return f"```svg\n{code}\n```"


def test_two_different_code_blocks_earn_nothing():
    assert _accuracy(CODE, _fence(SVG)) == 1.0
    assert _accuracy(CODE, f"{_fence(EMPTY_SVG)}\nor\n{_fence(SVG)}") == 0.0
    assert _accuracy(CODE, f"{_fence(SVG)}\nor\n{_fence(EMPTY_SVG)}") == 0.0


def test_the_same_code_block_twice_is_one_answer():
    assert _accuracy(CODE, f"{_fence(SVG)}\nagain:\n{_fence(SVG)}") == 1.0


# --- math: several statements ---------------------------------------------------------------------------------
# math-verify reads the last line, sentence or $…$ of what it is given, and any expression it reads that
# matches counts: "5\n4" and "$5$; $4$" earned for 4. An answer stating different things is a hedge.


@pytest.mark.parametrize(
    "hedge",
    [
        "5\n4",  # two lines
        "4\n5",
        r"5 \\ 4",  # a LaTeX line break
        "5. 4",  # two sentences
        "$5$; $4$",  # two math spans
        "$5$, then $4$",
        "$$5$$ $$4$$",
        r"\(5\) or \(4\)",
        r"\[5\] \[4\]",
    ],
)
def test_a_math_answer_stating_two_things_earns_nothing(hedge):
    assert _accuracy(MATH, hedge) == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        "4",
        "$4$",
        "$$4$$",
        "4.",  # a full stop ending the one sentence
        r"\frac{8}{2}",
        "$4$\n$4$",  # the same expression twice
        r"x = \begin{cases} 4 & \text{if } y \\ 4 & \text{else} \end{cases}",  # rows of one environment
    ],
)
def test_one_math_expression_is_read(answer):
    assert _accuracy(MATH, answer) == 1.0


# --- multiple choice: a lowercase letter beside a capital -------------------------------------------------------
# Capitals were read anywhere and lowercase letters only as the whole answer, so "(b) or (C)" read C.


@pytest.mark.parametrize("small", ["(b)", "b)", "[b]", "**b**"])
def test_a_small_letter_beside_a_capital_is_a_hedge(small):
    assert _accuracy(MC, small) == 1.0  # "(b)" alone: B, right
    for hedge in (f"{small} or (C)", f"(C) or {small}", f"{small} or C"):
        assert _accuracy({**MC, "answer": "C"}, hedge) == 0.0
        assert _accuracy(MC, hedge) == 0.0
    assert _accuracy(MC, f"{small} or (b)") == 1.0  # one letter twice


def test_a_small_letter_that_is_a_word_is_no_option():
    # "a" the article and a letter inside "e.g." are no options: C alone
    assert _accuracy({**MC, "answer": "C"}, "C, a green one (e.g. grass)") == 1.0


def test_a_reference_with_two_different_code_blocks_is_an_invalid_sample():
    sample = {**CODE, "answer": f"{_fence(EMPTY_SVG)}\n{_fence(SVG)}", "id": "c1"}
    with pytest.raises(InvalidSample, match=r"c1.*several different code blocks"):
        score(sample, f"<answer>{_fence(SVG)}</answer>")


@pytest.mark.parametrize(
    "hedge",
    [
        "between 10 and 20 seconds, or 30 and 40 seconds",
        "from 10 to 20 s or else 30 to 40 s",
        "10 - 20 seconds, or maybe 30 and 40",
    ],
)
def test_a_second_interval_after_or_in_a_shortened_form_is_a_hedge(hedge):
    # found by review: the elliptical second interval ("30 and 40") matched no interval pattern alone
    sample = {"problem_type": "temporal grounding", "answer": {"time": [10, 20]}}
    assert score(sample, f"<answer>{hedge}</answer>").accuracy == 0.0
    assert score(sample, "<answer>between 10 and 20 seconds</answer>").accuracy == 1.0
