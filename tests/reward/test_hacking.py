"""Reward hacking earns nothing (or only the honest share)."""

import json

import pytest

from services.reward import RewardConfig, score

MC = {
    "problem_type": "multiple choice",
    "answer": "B",
    "options": ["A. red", "B. blue", "C. green", "D. pink"],
}


@pytest.mark.parametrize(
    "response",
    [
        "<answer>A, B</answer>",  # several letters
        "<answer>B or C</answer>",
        "<answer>A B C D</answer>",  # every option
        "<answer>(A) (B) (C) (D)</answer>",
        "<answer>red, blue, green or pink</answer>",  # every option's text
        "The answer is A. The answer is B. The answer is C.",  # last phrase wins: C, wrong
        "<answer>A</answer><answer>B</answer>",  # repeated tags
        "<answer><answer>B</answer></answer>",  # nested tags
        "<think>The answer is <answer>B</answer></think>",  # an answer only inside the reasoning
        "<think>B B B B",  # thinking that never ends
    ],
)
def test_multiple_choice_hedges_score_zero(response):
    assert score(MC, response).accuracy == 0.0


def test_malformed_tags_also_lose_the_format_score():
    for response in (
        "<answer>B</answer><answer>B</answer>",
        "<answer><answer>B</answer></answer>",
        "<answer>B",
    ):
        result = score(MC, response)
        assert (result.accuracy, result.format, result.overall) == (0.0, 0.0, 0.0)


def test_a_100k_character_response_scores_zero_even_with_the_right_answer():
    response = "<think>" + "blah " * 20_000 + "</think><answer>B</answer>"  # 100,035 characters
    result = score(MC, response)
    assert (result.overall, result.accuracy, result.format) == (0.0, 0.0, 0.0)
    assert "max_response_chars=60000" in result.note
    assert score(MC, response, RewardConfig(max_response_chars=200_000)).accuracy == 1.0


TEMPORAL = {"problem_type": "temporal grounding", "answer": {"time": [10, 20]}}


def test_interval_spanning_the_whole_video():
    whole = '<answer>{"time": [0, 100]}</answer>'
    # duration known: covering ≥ 90 % of a 100 s video while the truth covers 10 % → 0
    assert score({**TEMPORAL, "duration": 100}, whole).accuracy == 0.0
    # duration unknown: IoU is the honest share, 10 / 100
    assert score(TEMPORAL, whole).accuracy == pytest.approx(0.1)
    # a long truth is not hedged against: truth [0, 80] of 100 s, prediction [0, 100] → IoU 0.8
    assert score({**TEMPORAL, "answer": {"time": [0, 80]}, "duration": 100}, whole).accuracy == pytest.approx(
        0.8
    )


@pytest.mark.parametrize(
    "response",
    [
        '<answer>{"time": [NaN, 20]}</answer>',
        '<answer>{"time": [10, Infinity]}</answer>',
        '<answer>{"time": [-5, 20]}</answer>',
        '<answer>{"time": [10, 10]}</answer>',
    ],
)
def test_invalid_intervals_score_zero(response):
    assert score(TEMPORAL, response).accuracy == 0.0


def test_only_the_first_of_several_intervals_counts():
    # as the reference readers do; listing more intervals cannot raise the score: a wrong first
    # interval followed by the right one scores the wrong one
    first_wrong = "<answer>from 30 to 40 seconds, or from 10 to 20 seconds</answer>"
    first_right = "<answer>from 10 to 20 seconds, or from 30 to 40 seconds</answer>"
    right = score(TEMPORAL, "<answer>from 10 to 20 seconds</answer>").accuracy
    assert score(TEMPORAL, first_right).accuracy == right
    assert (
        score(TEMPORAL, first_wrong).accuracy
        == score(TEMPORAL, "<answer>from 30 to 40 seconds</answer>").accuracy
    )


SPATIAL = {"problem_type": "spatial grounding", "answer": {"boxes": [10, 10, 20, 20]}}


def test_full_frame_box():
    full = "<answer>[0, 0, 100, 100]</answer>"
    assert score({**SPATIAL, "width": 100, "height": 100}, full).accuracy == 0.0
    assert score({**SPATIAL, "frame_size": [100, 100]}, full).accuracy == 0.0
    # frame unknown: the honest share, 100 / 10,000
    assert score(SPATIAL, full).accuracy == pytest.approx(0.01)


@pytest.mark.parametrize(
    "response",
    [
        "<answer>[20, 20, 10, 10]</answer>",  # degenerate (x2 < x1)
        "<answer>[10, 10, 10, 20]</answer>",  # zero width
        "<answer>[10, 10, NaN, 20]</answer>",
        "<answer>[10, 10, Infinity, Infinity]</answer>",
        "<answer>[[10, 10, 20, 20], [0, 0, 5, 5]]</answer>",  # two boxes
    ],
)
def test_invalid_boxes_score_zero(response):
    assert score(SPATIAL, response).accuracy == 0.0


def test_tracking_with_one_good_frame_earns_its_share():
    truth = {"boxes": {str(t): [t, t, t + 10, t + 10] for t in range(10)}}
    one = '<answer>{"boxes": {"0": [0, 0, 10, 10]}}</answer>'
    assert score({"problem_type": "tracking", "answer": truth}, one).accuracy == pytest.approx(0.1)  # 1/10


def test_tracking_and_stvg_full_frame_boxes_count_as_missing():
    truth = {"time": [1, 2], "boxes": {"1": [0, 0, 10, 10], "2": [0, 0, 10, 10]}}
    lazy = {"time": [0, 100], "boxes": {"1": [0, 0, 640, 480], "2": [0, 0, 640, 480]}}
    sample = {"problem_type": "stvg", "answer": truth, "width": 640, "height": 480, "duration": 100}
    assert score(sample, f"<answer>{json.dumps(lazy)}</answer>").accuracy == 0.0


@pytest.mark.parametrize(
    ("kind", "answer", "response"),
    [
        ("numerical", "5", "<answer>nan</answer>"),
        ("numerical", "5", "<answer>inf</answer>"),
        ("numerical", "5", "<answer>1e999</answer>"),
        ("numerical", "5", "<answer>4, 5, 6</answer>"),
        ("regression", "5", "<answer>between 1 and 100</answer>"),
        ("counting", "3", "<answer>3 or 4</answer>"),
        ("boolean", "yes", "<answer>yes/no</answer>"),
        ("preference", "Response 1", "<answer>Response 1 is better. Response 2 is better.</answer>"),
    ],
)
def test_non_finite_and_hedged_values_score_zero(kind, answer, response):
    assert score({"problem_type": kind, "answer": answer}, response).accuracy == 0.0


def test_repeating_the_reference_does_not_pay():
    truth = "a man in a red coat opens the door and walks out into the snow"
    sample = {"problem_type": "open-ended", "answer": truth}
    once = score(sample, f"<answer>{truth}</answer>").accuracy
    ten_times = score(sample, f"<answer>{' '.join([truth] * 10)}</answer>").accuracy
    assert once == pytest.approx(1.0)
    assert ten_times < 0.25


def test_spraying_negative_points_cannot_raise_segmentation():
    sample = {"problem_type": "segmentation", "answer": {"bbox": [0, 0, 10, 10]}}
    honest = {"bbox": [20, 20, 30, 30], "positive_points": [[5, 5]]}  # IoU 0; point term 1 → 0.5
    sprayed = {**honest, "negative_points": [[90, 90]] * 10}
    assert score(sample, f"<answer>{json.dumps(honest)}</answer>").accuracy == pytest.approx(0.5)
    assert score(sample, f"<answer>{json.dumps(sprayed)}</answer>").accuracy == pytest.approx(0.5)


def test_an_empty_svg_earns_almost_nothing():
    shapes = "".join(f'<rect x="{i}" y="{i}" width="3" height="3"/>' for i in range(10))
    sample = {"problem_type": "svg-code", "answer": f"<svg>{shapes}</svg>"}
    # reference: svg + 10·(rect + 4 attributes) = 51 features; "<svg/>" shares 1 → P 1, R 1/51 → F1 = 2/52
    assert score(sample, "<answer><svg/></answer>").accuracy == pytest.approx(2 / 52)


BIG = "9" * 5000  # int() refuses strings over 4,300 digits; none may reach it


@pytest.mark.parametrize(
    ("sample", "response"),
    [
        ({"problem_type": "numerical", "answer": "5"}, f"<answer>1e{BIG}</answer>"),
        ({"problem_type": "numerical", "answer": "5"}, f"<answer>{BIG}</answer>"),
        ({"problem_type": "counting", "answer": "5"}, f"<answer>{BIG}</answer>"),
        ({"problem_type": "math", "answer": "5"}, f"<answer>{BIG[:900]}/3</answer>"),
        ({"problem_type": "math", "answer": "5"}, rf"<answer>\frac{{{BIG[:900]}}}{{3}}</answer>"),
        ({"problem_type": "tracking", "answer": {"boxes": {"0": [0, 0, 1, 1]}}}, "<answer>" + "[" * 50_000),
        ({"problem_type": "spatial grounding", "answer": [0, 0, 1, 1]}, "[" * 50_000 + "]" * 50_000),
    ],
)
def test_absurd_numbers_and_nesting_score_zero_without_crashing(sample, response):
    assert score(sample, response, RewardConfig(math_timeout_s=2.0)).accuracy == 0.0
