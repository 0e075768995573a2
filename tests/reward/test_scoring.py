"""Format score, weights, strict mode, components, batches and errors."""

import pytest
from pydantic import ValidationError

from services.reward import InvalidSample, RewardConfig, UnknownProblemType, score, score_batch, score_items

MC = {"problem_type": "multiple choice", "answer": "B", "options": ["A. red", "B. blue"]}


@pytest.mark.parametrize(
    ("response", "strict", "fmt"),
    [
        ("<answer>B</answer>", False, 1.0),  # a tag whose content fits the type
        ("<answer>purple</answer>", False, 0.5),  # a tag with ill-typed content
        ("B", False, 0.0),  # no tag
        ("<answer>A</answer><answer>B</answer>", False, 0.0),  # repeated tags
        ("<think>x</think><answer>B</answer>", True, 1.0),
        ("<think>x</think>\n<answer>purple</answer>\n", True, 0.5),
        ("<answer>B</answer>", True, 0.0),  # strict: thinking required
        ("<think>x</think><answer>B</answer> trailing", True, 0.0),
        ("x</think><answer>B</answer>", True, 0.0),  # the opening tag must be in the response
    ],
)
def test_format_score(response, strict, fmt):
    assert score(MC, response, RewardConfig(strict_format=strict)).format == fmt


@pytest.mark.parametrize(
    ("w_acc", "w_fmt", "response", "overall"),
    [
        (0.9, 0.1, "<answer>B</answer>", 1.0),  # 0.9·1 + 0.1·1
        (0.9, 0.1, "<answer>A</answer>", 0.1),  # 0.9·0 + 0.1·1
        (0.9, 0.1, "B", 0.9),  # 0.9·1 + 0.1·0
        (0.5, 0.5, "<answer>purple</answer>", 0.25),  # 0.5·0 + 0.5·0.5
        (1.0, 0.0, "<answer>A</answer>", 0.0),
    ],
)
def test_overall_is_the_weighted_sum(w_acc, w_fmt, response, overall):
    result = score(MC, response, RewardConfig(w_acc=w_acc, w_fmt=w_fmt))
    assert result.overall == pytest.approx(overall)
    assert result.overall == pytest.approx(w_acc * result.accuracy + w_fmt * result.format)


def test_config_rejects_bad_weights():
    with pytest.raises(ValidationError, match="w_acc \\+ w_fmt must be > 0"):
        RewardConfig(w_acc=0, w_fmt=0)
    with pytest.raises(ValidationError):
        RewardConfig(w_acc=float("nan"))
    with pytest.raises(ValidationError):
        RewardConfig(w_fmt=-0.1)


def test_unknown_problem_type_names_the_known_ones():
    with pytest.raises(UnknownProblemType) as info:
        score({"problem_type": "astrology", "answer": "B"}, "<answer>B</answer>")
    message = str(info.value)
    assert "'astrology'" in message
    for known in ("multiple choice", "regression", "spatial-temporal grounding", "preference"):
        assert known in message


@pytest.mark.parametrize(
    ("sample", "match"),
    [
        ({"problem_type": "mcq"}, "field answer: Field required"),
        ({"problem_type": "mcq", "answer": "  "}, "no answer"),
        ({"problem_type": "mcq", "solution": "<answer>B</answer>"}, None),  # Video-R1 schema: accepted
        ({"answer": "B"}, "field problem_type"),
        ({"problem_type": "mcq", "answer": "B", "options": [{"x": 1}]}, "options must be"),
        ({"problem_type": "mcq", "answer": "B", "width": -3}, "field width"),
        ({"id": 17, "problem_type": "numerical", "answer": "lots"}, "sample '17'"),
    ],
)
def test_invalid_samples_are_explained(sample, match):
    if match is None:
        assert score(sample, "<answer>B</answer>").accuracy == 1.0
        return
    with pytest.raises(InvalidSample, match=match):
        score(sample, "<answer>B</answer>")


def test_score_batch_shares_a_groups_truth_and_keeps_order():
    group = [(MC, "<answer>B</answer>"), (MC, "<answer>A</answer>"), (MC, "no idea")]
    results = score_batch(group)
    assert [r.accuracy for r in results] == [1.0, 0.0, 0.0]
    assert [r.format for r in results] == [1.0, 1.0, 0.0]


def test_score_batch_raises_naming_the_item():
    with pytest.raises(UnknownProblemType, match="item 1: unknown problem_type 'nope'"):
        score_batch([(MC, "B"), ({"problem_type": "nope", "answer": "x"}, "B")])


def test_score_items_fails_bad_items_alone():
    results = score_items(
        [
            (MC, "<answer>B</answer>"),
            ({"problem_type": "nope", "answer": "x"}, "B"),
            ("not a dict", "B"),
            (MC, 7),
        ]
    )
    assert results[0].accuracy == 1.0 and results[0].error is None
    assert "unknown problem_type" in results[1].error
    assert "must be a JSON object" in results[2].error
    assert "response must be a string" in results[3].error
    assert all(r.overall == 0.0 for r in results[1:])
