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


# Every way the choice reader accepts a letter or an option, with the right one (B) and a wrong one (A)
# written in it. Each form reads B on its own; two options in one form are a hedge and read as nothing.
# The full-width forms (issue 36 §4) are read through NFKC: "Ｂ" (U+FF22) is "B".
CHOICE_FORMS = {
    "letter": "{}",
    "parentheses": "({})",
    "period": "{}.",
    "right parenthesis": "{})",
    "colon": "{}:",
    "bold": "**{}**",
    "brackets": "[{}]",
    "after a phrase": "The answer is {}",
    "lettered option": "{}. {}",
    "full-width letter": "{}",
    "full-width parentheses": "（{}）",
}
TEXT = {"A": "red", "B": "blue"}
FULL_WIDTH = {"A": "\uff21", "B": "\uff22"}  # Ａ, Ｂ


def _written(name: str, letter: str) -> str:
    form = CHOICE_FORMS[name]
    if name == "lettered option":
        return form.format(letter, TEXT[letter])
    return form.format(FULL_WIDTH[letter] if name.startswith("full-width") else letter)


@pytest.mark.parametrize("name", CHOICE_FORMS)
def test_each_choice_form_is_read(name):
    result = score(MC, f"<answer>{_written(name, 'B')}</answer>")
    assert (result.accuracy, result.extracted) == (1.0, "B")


@pytest.mark.parametrize("name", CHOICE_FORMS)
@pytest.mark.parametrize("joint", [" or ", ", ", " and "])
def test_a_hedge_in_each_choice_form_scores_zero(name, joint):
    right, wrong = _written(name, "B"), _written(name, "A")
    hedges = [f"{right}{joint}{wrong}", f"{wrong}{joint}{right}"]
    if name == "after a phrase":  # the phrase once, then both letters (of several phrases the last counts)
        hedges = [f"The answer is B{joint}A", f"The answer is A{joint}B"]
    for hedge in hedges:
        assert score(MC, f"<answer>{hedge}</answer>").accuracy == 0.0, hedge


@pytest.mark.parametrize(
    "response",
    [
        "<answer>blue or red</answer>",  # option texts
        "<answer>b or a</answer>",  # lone lowercase letters are letters only alone
        "<answer>\uff21\u3001\uff22</answer>",  # Ａ、Ｂ
        "<answer>\uff22 or A</answer>",  # full-width and ASCII mixed
        "<answer>\uff41 or \uff42</answer>",  # ａ or ｂ
    ],
)
def test_other_choice_hedges_score_zero(response):
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


# Issue 36 §4: an interval written end first is an invalid answer, not the reversed valid one (commit
# 13ff270 had answers swapped, so [20, 10] earned the full IoU of [10, 20]).
@pytest.mark.parametrize(
    "response",
    [
        '<answer>{"time": [20, 10]}</answer>',
        '<answer>{"start": 20, "end": 10}</answer>',
        "<answer>[20, 10]</answer>",
        "<answer>from 20 to 10 seconds</answer>",
        "The event happens in the 20 - 10 seconds.",
        "Start time: 20 seconds\nEnd time: 10 seconds",
        "<answer>00:20 to 00:10</answer>",
    ],
)
def test_an_interval_written_end_first_scores_zero(response):
    assert score(TEMPORAL, response).accuracy == 0.0


# Every form the temporal reader accepts, written for [s, e]. Each reads [10, 20] on its own (IoU 1 with
# the truth [10, 20]); two intervals in that form are a hedge and read as nothing (issue 36 §4: commit
# 13ff270 had the first of several count, so "[10, 20] or [30, 40]" earned full credit).
INTERVAL_FORMS = {
    "json time": '{{"time": [{}, {}]}}',
    "json timestamps": '{{"timestamps": [{}, {}]}}',
    "json start/end": '{{"start": {}, "end": {}}}',
    "json start_time/end_time": '{{"start_time": {}, "end_time": {}}}',
    "json begin/end": '{{"begin": {}, "end": {}}}',
    "bare list": "[{}, {}]",
    "from … to": "from {} to {} seconds",
    "between … and": "between {} and {} seconds",
    "dash": "{} - {} seconds",
    "to": "{} to {} seconds",
    "starts … ends": "starts at {} seconds and ends at {} seconds",
    "Start time / End time": "Start time: {} seconds\nEnd time: {} seconds",
    "Starting / Ending time": "Starting time: {} seconds\nEnding time: {} seconds",
    "the start time … the end time": "The start time for this event is {} seconds, and the end time is {} seconds.",
    "start: … end:": "start: {}s, end: {}s",
    "parentheses": "({}, {})",
    "bracketed units": "[{}s, {}s]",
}


@pytest.mark.parametrize("form", INTERVAL_FORMS.values(), ids=INTERVAL_FORMS.keys())
def test_each_interval_form_is_read(form):
    assert score(TEMPORAL, f"<answer>{form.format(10, 20)}</answer>").accuracy == 1.0


@pytest.mark.parametrize("form", INTERVAL_FORMS.values(), ids=INTERVAL_FORMS.keys())
@pytest.mark.parametrize("joint", [" or ", "\n", ", "])
def test_a_hedge_in_each_interval_form_scores_zero(form, joint):
    right, wrong = form.format(10, 20), form.format(30, 40)
    assert score(TEMPORAL, f"<answer>{right}{joint}{wrong}</answer>").accuracy == 0.0
    assert score(TEMPORAL, f"<answer>{wrong}{joint}{right}</answer>").accuracy == 0.0


@pytest.mark.parametrize(
    "response",
    [
        "<answer>00:10 to 00:20 or 00:30 to 00:40</answer>",  # mm:ss times
        '<answer>{"time": [10, 20]} or from 30 to 40 seconds</answer>',  # two forms
        "<answer>from 30 to 40 seconds, i.e. [10, 20]</answer>",
        "<answer>starts at 10 seconds and ends at 20 seconds, or between 30 and 40 seconds</answer>",
        "<answer>from 10 to 20 or 40 seconds</answer>",  # the end hedged
        "<answer>from 5 or 10 to 20 seconds</answer>",  # the start hedged
        "<answer>[10, 20] / [30, 40]</answer>",
        '```json\n{"time": [10, 20]}\n```\n```json\n{"time": [30, 40]}\n```',
    ],
)
def test_other_interval_hedges_score_zero(response):
    assert score(TEMPORAL, response).accuracy == 0.0


def test_the_same_interval_written_twice_is_one_answer():
    assert score(TEMPORAL, '<answer>{"time": [10, 20]}, i.e. from 10 to 20 seconds</answer>').accuracy == 1.0
    assert score(TEMPORAL, "<answer>[10, 20], i.e. [10, 20]</answer>").accuracy == 1.0


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
