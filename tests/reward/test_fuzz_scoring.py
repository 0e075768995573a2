"""Property: for a valid sample of any type, no response makes scoring fail or leave its bounds; an
unexpected exception fails only its own item."""

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.reward import RewardConfig, score_items
from services.reward.registry import get_type

SAMPLES = [
    {"problem_type": "multiple choice", "answer": "B", "options": ["A. red", "B. blue", "C. green"]},
    {"problem_type": "numerical", "answer": "3.5"},
    {"problem_type": "regression", "answer": "10"},
    {"problem_type": "boolean", "answer": "yes"},
    {"problem_type": "counting", "answer": "3"},
    {"problem_type": "ocr", "answer": "EXIT 12"},
    {"problem_type": "open-ended", "answer": "a man opens the door and walks into the snow"},
    {"problem_type": "math", "answer": r"\frac{1}{2}"},
    {"problem_type": "temporal grounding", "answer": {"time": [2, 6]}, "duration": 30},
    {"problem_type": "spatial grounding", "answer": {"boxes": [0, 0, 10, 10]}, "width": 100, "height": 100},
    {"problem_type": "spatial-temporal grounding", "answer": {"time": [0, 2], "boxes": {"1": [0, 0, 5, 5]}}},
    {"problem_type": "tracking", "answer": {"boxes": {"0": [0, 0, 5, 5], "1": [1, 1, 6, 6]}}},
    {"problem_type": "segmentation", "answer": {"bbox": [0, 0, 10, 10]}},
    {"problem_type": "svg-code", "answer": "<svg><rect x='1'/></svg>"},
    {"problem_type": "critic", "answer": "Response 1"},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(["time", "boxes", "bbox", "1"]), inner)
    ),
    max_leaves=12,
)
fragments = st.sampled_from(
    ["<answer>", "</answer>", "<think>", "</think>", r"\boxed{", "}", "(B)", " 3 ", "```"]
)
responses = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(fragments, st.text(max_size=10)), max_size=12).map("".join),
    json_values.map(lambda v: f"<answer>{json.dumps(v)}</answer>"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SAMPLES), responses)
def test_scoring_stays_in_bounds(sample, response):
    (result,) = score_items([(sample, response)], RewardConfig(math_timeout_s=1.0))
    assert result.error is None
    assert 0.0 <= result.accuracy <= 1.0
    assert result.format in (0.0, 0.5, 1.0)
    assert result.overall == 0.9 * result.accuracy + 0.1 * result.format
    json.dumps(result.extracted, allow_nan=False)  # always serialisable for the HTTP answer


# Inputs on which a parser raises something other than its syntax error: CPython's ast.parse gives
# MemoryError on 50,000 unary minuses and RecursionError on 12,000 chained additions.
PARSER_BREAKERS = [
    ("code", "x = 1", "x = " + "-" * 50_000 + "1"),
    ("code", "x = 1", "x = 1" + " + 1" * 12_000),
    ("code", "x = 1", "x = " + "[" * 5_000 + "]" * 5_000),
    ("code", "x = 1", "not " * 10_000 + "x"),
    ("svg-code", "<svg><g/></svg>", "<svg>" + "<g>" * 5_000 + "</g>" * 5_000 + "</svg>"),
    ("html-code", "<div><p>x</p></div>", "<div>" * 5_000 + "</div>" * 5_000),
]


@pytest.mark.parametrize(("kind", "truth", "code"), PARSER_BREAKERS)
def test_pathological_code_scores_without_an_error(kind, truth, code):
    (result,) = score_items([({"problem_type": kind, "answer": truth}, f"<answer>{code}</answer>")])
    assert result.error is None
    assert 0.0 <= result.accuracy <= 1.0
    assert result.format in (0.5, 1.0)


def test_an_unexpected_exception_fails_its_item_alone(monkeypatch, caplog):
    def broken(*_args):
        raise RuntimeError("boom")

    monkeypatch.setattr(get_type("numerical"), "accuracy", broken)
    items = [
        ({"problem_type": "boolean", "answer": "yes"}, "<answer>yes</answer>"),
        ({"problem_type": "numerical", "answer": "1"}, "<answer>1</answer>"),
        ({"problem_type": "boolean", "answer": "no"}, "<answer>no</answer>"),
    ]
    with caplog.at_level(logging.ERROR, logger="services.reward.scoring"):
        first, broken_item, last = score_items(items)
    assert (first.accuracy, first.error, last.accuracy, last.error) == (1.0, None, 1.0, None)
    assert (broken_item.overall, broken_item.problem_type) == (0.0, "numerical")
    assert broken_item.error.startswith("item 1: ") and "RuntimeError: boom" in broken_item.error
    assert "reward item 1: unexpected RuntimeError" in caplog.text
