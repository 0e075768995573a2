"""JSON, intervals and boxes: read and validated together."""

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reward.extract.structured import (
    FENCE,
    as_box,
    as_interval,
    boxes_by_frame,
    find_interval,
    find_json,
    single_box,
)
from services.reward.timelimit import time_limit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"time": [1, 2]}', {"time": [1, 2]}),
        ('here: ```json\n{"a": 1}\n``` and {"b": 2}', None),  # a fenced value and another: two answers
        ("text [1, 2, 3, 4] more", [1, 2, 3, 4]),
        ("{not json} [5, 6]", [5, 6]),  # a failed start is skipped
        ("no json", None),
        ("[1, 2] or [3, 4]", None),  # two different answers: a hedge
        ('{"a": 1} and again {"a": 1}', {"a": 1}),  # the same one twice is one answer
        ('```\nno json here\n``` {"c": 3}', {"c": 3}),  # fences without JSON: the whole text
    ],
)
def test_find_json(text, expected):
    assert find_json(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"time": [3.5, 7.0]}', (3.5, 7.0)),
        ("from 12.5 to 20 seconds", (12.5, 20.0)),
        ("between 3s and 7s", (3.0, 7.0)),
        ("The event happens in the 24.3 - 30.4 seconds.", (24.3, 30.4)),
        ("00:12 to 01:05", (12.0, 65.0)),  # mm:ss → 65 = 1·60 + 5
        ("[3.0, 7.5]", (3.0, 7.5)),
        ("from 1 to 2 s and from 5 to 6 s", None),  # a truth with two intervals is ambiguous
        ('{"time": [7, 3]}', None),  # a truth written end first is invalid
        ('{"time": [3, 3]}', None),  # empty
        ('{"time": [-1, 3]}', None),  # negative start
        ('{"time": [NaN, 3]}', None),
        ('{"time": [0, Infinity]}', None),
        ('{"time": [1, 2, 3]}', None),
        ('{"start": 3.5, "end": 7}', (3.5, 7.0)),
        ('{"start_time": "3.5", "end_time": 7}', (3.5, 7.0)),
        ("(3.5, 7)", (3.5, 7.0)),
        ("[3.5s, 7 sec]", (3.5, 7.0)),
        ("starts at 3.5 s and ends at 7 s", (3.5, 7.0)),
        ("starting from 00:03 and ending at 00:07", (3.0, 7.0)),
        ("[3.5, 7] or [10, 12]", None),
    ],
)
def test_find_interval(text, expected):
    assert find_interval(text) == expected


# Reading an answer (answer=True): the phrasings the reference readers (lmms-eval's and TimeChat's
# extract_time) accept. An answer is held to a truth's rule (issue 36 §4): an interval written end first
# is invalid and several different intervals, in one form or in several, are a hedge.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Start time: 4.2 seconds\nEnd time: 9.8 seconds", (4.2, 9.8)),
        ("Starting time: 0.8 seconds\nEnding time: 1.1 seconds", (0.8, 1.1)),
        ("The start time for this event is 0 seconds, and the end time is 12 seconds.", (0.0, 12.0)),
        ("start: 3.0s, end: 7.5s", (3.0, 7.5)),
        ("starts at 3.5 s and ends at 7 s", (3.5, 7.0)),
        ("The event happens in the 9.8 - 4.2 seconds.", None),  # end first: invalid, not swapped
        ('{"time": [7, 3]}', None),
        ("from 1 to 2 s and from 5 to 6 s", None),  # two intervals: a hedge
        ("[3.5, 7] or [10, 12]", None),
        ('{"time": [3.5, 7]} or from 10 to 12 s', None),  # two forms, two intervals
        ("from 3 to 7 or 9 seconds", None),  # an end offered two ways
        ('{"time": [3.5, 7]}, i.e. from 3.5 to 7 s', (3.5, 7.0)),  # one interval, two forms
        # an interval beside fenced JSON is a second answer (a hedge), whatever it claims to be
        ('```json\n{"time": [3.5, 7]}\n```\nThe clip runs 0 - 30 s.', None),
        ('```json\n{"time": [3.5, 7]}\n```\n```json\n{"time": [10, 12]}\n```', None),
        ('{"time": [3, 3]}', None),  # still empty
        ('{"time": [-1, 3]}', None),  # still negative
        ("The restart ends at 5 seconds.", None),  # "restart" is no start keyword
    ],
)
def test_find_interval_in_an_answer(text, expected):
    assert find_interval(text, answer=True) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([1, 2, 3, 4], (1.0, 2.0, 3.0, 4.0)),
        (["1", "2", "3", "4"], (1.0, 2.0, 3.0, 4.0)),
        ([3, 2, 1, 4], None),  # x2 ≤ x1
        ([1, 2, 3, 2], None),  # y2 ≤ y1
        ([1, 2, math.nan, 4], None),
        ([1, 2, math.inf, 4], None),
        ([1, 2, 3], None),
        ([True, 2, 3, 4], None),  # a boolean is not a coordinate
    ],
)
def test_as_box(value, expected):
    assert as_box(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([{"bbox_2d": [1, 2, 3, 4], "label": "dog"}], (1.0, 2.0, 3.0, 4.0)),  # Qwen2.5-VL style
        ({"boxes": [1, 2, 3, 4]}, (1.0, 2.0, 3.0, 4.0)),
        ([[1, 2, 3, 4], [1, 2, 3, 4]], (1.0, 2.0, 3.0, 4.0)),  # the same box twice is one box
        ([[1, 2, 3, 4], [5, 6, 7, 8]], None),  # two boxes: a hedge
        ({"label": "dog"}, None),
    ],
)
def test_single_box(value, expected):
    assert single_box(value) == expected


def test_boxes_by_frame_normalises_keys_and_drops_invalid_boxes():
    frames = boxes_by_frame(
        {"boxes": {"3": [0, 0, 1, 1], "4.0": [0, 0, 2, 2], "5": [2, 2, 1, 1], "x": [0, 0, 1, 1]}}
    )
    assert frames == {3.0: (0.0, 0.0, 1.0, 1.0), 4.0: (0.0, 0.0, 2.0, 2.0)}
    assert boxes_by_frame([[0, 0, 1, 1]]) == {0.0: (0.0, 0.0, 1.0, 1.0)}  # a list: index = frame
    assert boxes_by_frame("nope") is None


@pytest.mark.parametrize(
    ("value", "frame_keys", "expected"),
    [
        ([[0, 0, 1, 1], [1, 1, 2, 2]], [0.5, 1.0], {0.5: (0, 0, 1, 1), 1.0: (1, 1, 2, 2)}),  # onto the keys
        ([[0, 0, 1, 1]], [0.5, 1.0], None),  # lengths differ: which frame is it?
        ([[0, 0, 1, 1]], None, {0.0: (0, 0, 1, 1)}),  # a truth: index = frame
        ([{"frame": 2, "bbox_2d": [0, 0, 1, 1]}, {"bbox": [0, 0, 1, 1]}], [0.0], {2.0: (0, 0, 1, 1)}),
        ({"boxes": [{"timestamp": "1.5", "box": [0, 0, 1, 1]}]}, None, {1.5: (0, 0, 1, 1)}),
    ],
)
def test_boxes_by_frame_lists(value, frame_keys, expected):
    assert boxes_by_frame(value, frame_keys) == expected


def test_as_interval_rejects_non_pairs():
    assert as_interval((1, 2)) == (1.0, 2.0)
    assert as_interval("1-2") is None


# The fence pattern before its blanks and language were matched possessively.
_BACKTRACKING_FENCE = re.compile(r"```[ \t]*([\w+-]*)(?:[^\n`]*\n)?(.*?)```", re.S)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="```` \t\nab+-{}[]1:", max_size=60))
def test_the_possessive_fence_reads_what_the_backtracking_one_read(text):
    assert [(m.span(), m.groups()) for m in FENCE.finditer(text)] == [
        (m.span(), m.groups()) for m in _BACKTRACKING_FENCE.finditer(text)
    ]


def test_an_unclosed_fence_is_read_in_linear_time():
    with time_limit(20):  # a bound, not a benchmark: "```" + 80,000 letters took 60 s in one regex call
        assert find_json("```" + "a" * 100_000) is None
        assert find_json("```" + " " * 100_000) is None
        assert find_interval("```json\n" + "a" * 100_000 + '{"time": [1, 2]}') == (1.0, 2.0)
