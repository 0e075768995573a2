"""The reward-side sample model: options, wrapped answers, extra fields."""

import pytest

from services.reward import InvalidSample, RewardSample
from services.reward.sample import parse_options


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
