"""Splitting responses into thinking, answer block and body; narrowing to the final answer."""

import pytest

from services.reward.extract.tags import after_final_phrase, answer_text, last_boxed, split_response


@pytest.mark.parametrize(
    ("response", "answer", "body", "malformed", "strict_ok"),
    [
        # closed thinking, one answer block: the canonical thinking format
        ("<think>why</think><answer>B</answer>", "B", "<answer>B</answer>", False, True),
        # answer block only (instruct models)
        ("<answer> 42 </answer>", "42", "<answer> 42 </answer>", False, False),
        # no tags at all: the whole text is the body
        ("The answer is C.", None, "The answer is C.", False, False),
        # the chat template opened <think>: reasoning ends at the lone </think>
        ("step 1 ... </think>\nFinal: B", None, "\nFinal: B", False, False),
        # thinking never closed: no body to search, the answer block after it still counts
        ("<think>still thinking, maybe B", None, None, False, False),
        ("<think>sure <answer>B</answer>", "B", None, False, False),
        # an answer block INSIDE the thinking is reasoning, not the answer
        ("<think>I'll write <answer>A</answer></think> so C", None, " so C", False, False),
        # repeated, nested and unclosed answer tags are malformed
        ("<answer>A</answer><answer>B</answer>", None, "<answer>A</answer><answer>B</answer>", True, False),
        ("<answer><answer>B</answer></answer>", None, "<answer><answer>B</answer></answer>", True, False),
        ("<answer>B", None, "<answer>B", True, False),
        ("</answer>B<answer>", None, "</answer>B<answer>", True, False),
        # strict needs exactly <think>…</think><answer>…</answer> and nothing around it
        ("<think>a</think><answer>B</answer> extra", "B", "<answer>B</answer> extra", False, False),
        ("<THINK>a</THINK>\n<ANSWER>B</ANSWER>", "B", "\n<ANSWER>B</ANSWER>", False, True),
    ],
)
def test_split_response(response, answer, body, malformed, strict_ok):
    parts = split_response(response)
    assert (parts.answer, parts.body, parts.malformed, parts.strict_ok) == (
        answer,
        body,
        malformed,
        strict_ok,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}", "42"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # the last one, nested braces balanced
        (r"\fbox{7}", "7"),
        (r"\boxed{unclosed", None),
        ("no box", None),
        (r"\boxed{3} and \boxed{4", "3"),  # the last box never closes: the earlier balanced one
        (r"\boxed{\boxed{5}}", "5"),  # the last-opened balanced box is the inner one
        (r"{ \boxed{6} } }", "6"),  # stray braces outside do not matter
        (r"\boxed {a{b}c}", "a{b}c"),
        (r"\boxed{}", ""),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.timeout(10)  # the old scan from every \boxed{ took minutes on this (quadratic)
def test_last_boxed_is_linear_on_many_unclosed_boxes():
    assert last_boxed("\\boxed{" * 20_000 + "A") is None
    assert last_boxed("\\boxed{B}" + "\\boxed{" * 20_000) == "B"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Therefore, the final answer is: B", "B"),
        ("The answer is 12. Because 3 + 9 = 12.", "12"),  # cut at the end of the sentence
        ("Answer: (C) blue", "(C) blue"),
        ("I choose D.", "D"),
        ("The best option is A\nsince ...", "A"),
        ("The answer is 3.5 meters.", "3.5 meters"),  # a decimal point is not a sentence end
        ("He answered quickly.", None),  # "answered" is not the phrase
        ("Let me answer the question", None),  # "answer" without is/: does not introduce one
        ("first answer: A. Wait. The answer is B.", "B"),  # the last phrase wins
    ],
)
def test_after_final_phrase(text, expected):
    assert after_final_phrase(text) == expected


@pytest.mark.parametrize(
    ("response", "phrases", "expected"),
    [
        (r"<answer>The answer is \boxed{5}</answer>", True, "5"),  # boxed beats everything
        ("<answer>The answer is B.</answer>", True, "B"),
        ("<answer>The answer is B.</answer>", False, "The answer is B."),
        ("thinking out loud. Final answer: 7", True, "7"),
        ("<answer>A</answer><answer>B</answer>", True, None),  # malformed → nothing
        ("<think>unfinished", True, None),
    ],
)
def test_answer_text(response, phrases, expected):
    assert answer_text(split_response(response), phrases=phrases) == expected
