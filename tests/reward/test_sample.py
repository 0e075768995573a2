"""The reward-side sample model: options, wrapped answers, extra fields."""

import re

import pytest

from services.reward import InvalidSample, RewardSample
from services.reward.sample import MAX_ANSWER_CHARS, MAX_NAME_CHARS, MAX_OPTION_CHARS, parse_options
from services.reward.scoring import as_sample


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["A. red", "B. blue"], [("A", "red"), ("B", "blue")]),
        (["A: red", "B: blue"], [("A", "red"), ("B", "blue")]),
        (["(A) red", "(B) blue"], [("A", "red"), ("B", "blue")]),
        (["A) red", "B) blue"], [("A", "red"), ("B", "blue")]),
        (["red", "blue"], [("A", "red"), ("B", "blue")]),  # letters assigned
        (["A. red", "blue"], [("A", "A. red"), ("B", "blue")]),  # mixed: letters assigned, text kept
        (["B. red", "B. blue"], [("A", "B. red"), ("B", "B. blue")]),  # duplicate letters: assigned
        ({"A": "red", "B": "blue"}, [("A", "red"), ("B", "blue")]),
        ("A. red\nB. blue\n", [("A", "red"), ("B", "blue")]),
        ([1, 2], [("A", "1"), ("B", "2")]),
        (None, []),
    ],
)
def test_parse_options(raw, expected):
    assert [(o.letter, o.text) for o in parse_options(raw)] == expected


def test_parse_options_rejects_what_it_cannot_letter():
    with pytest.raises(InvalidSample, match="single letters"):
        parse_options({"first": "red"})
    with pytest.raises(InvalidSample, match="at most 26"):
        parse_options([str(i) for i in range(27)])


def test_sample_keeps_extra_fields_and_unwraps_the_answer():
    sample = RewardSample.model_validate(
        {"problem_type": "mcq", "answer": " <answer> B </answer> ", "videos": ["a.mp4"], "id": 3}
    )
    assert sample.answer == "B"
    assert sample.id == "3"
    assert sample.extra_field("videos") == ["a.mp4"]
    assert sample.label == "sample '3'"


def test_structured_answers_stay_structured():
    sample = RewardSample.model_validate(
        {"problem_type": "tracking", "answer": {"boxes": {"0": [0, 0, 1, 1]}}}
    )
    assert sample.answer == {"boxes": {"0": [0, 0, 1, 1]}}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "answer",
            "x" * (MAX_ANSWER_CHARS + 1),
            "field answer: Value error, the ground truth has 100,001 characters",
        ),
        ("solution", "x" * (MAX_ANSWER_CHARS + 1), "field answer: Value error, the ground truth has 100,001"),
        # as compact JSON: '{"boxes":[' 10 + 20,000 × '[0,0,1,1]' 9 + 19,999 commas + ']}' 2 = 200,011
        (
            "answer",
            {"boxes": [[0, 0, 1, 1]] * 20_000},
            "field answer: Value error, the ground truth has 200,011",
        ),
        (
            "options",
            ["A. red", "B. " + "x" * MAX_OPTION_CHARS],
            "field options: Value error, option 1 has 4,003",
        ),
        ("options", {"A": "red", "B": "x" * (MAX_OPTION_CHARS + 1)}, "option 1 has 4,001 characters"),
        ("options", "A. red\nB. " + "x" * MAX_OPTION_CHARS, "option 1 has 4,003 characters"),
        ("problem_type", "m" * (MAX_NAME_CHARS + 1), "field problem_type: String should have at most 1000"),
        ("id", "v" * (MAX_NAME_CHARS + 1), "field id: String should have at most 1000"),
    ],
)
def test_texts_scoring_reads_are_bounded(field, value, message):
    sample = {"problem_type": "mcq", "answer": "B", **{field: value}}
    if field == "solution":
        del sample["answer"]
    with pytest.raises(InvalidSample, match=re.escape(message)):
        as_sample(sample)


def test_texts_at_their_bounds_are_accepted():
    sample = as_sample(
        {
            "problem_type": "open-ended",
            "answer": "x" * MAX_ANSWER_CHARS,
            "options": ["y" * MAX_OPTION_CHARS],
            "id": "v" * MAX_NAME_CHARS,
        }
    )
    assert len(sample.answer) == MAX_ANSWER_CHARS
    # the bound is on the ground truth as sent: <answer>…</answer> around it counts
    with pytest.raises(InvalidSample, match="at most 100,000"):
        as_sample({"problem_type": "ocr", "answer": f"<answer>{'x' * (MAX_ANSWER_CHARS - 10)}</answer>"})
